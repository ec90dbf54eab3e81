"""Expected-mode scoring with shared prefixes against scoring each request alone, on the
judge requests of each method (the real prompts of sparta/judging/prompts.py, the SmolLM2 base):

    python benchmarks/bench_scoring.py [--prompts 12] [--threads 1] [--judge MODEL]

Workloads (``--prompts`` arithmetic prompts of data/arithmetic.jsonl, answers made from their
worked solutions, right and wrong):

- sparta: one judge reads both answers of each duel (pointwise, the default judge settings);
- self_rewarding: a member reads its 4 answers to each prompt (the additive prompt);
- sppo: the annotator compares every two of 5 answers to each prompt in both orders (pairwise);
- meta_rewarding: the meta-judge compares every two of 3 judgments of one answer per prompt
  in both orders.

Printed per workload: requests, tokens computed with and without sharing, wall time of each
(one run, same process, alternating order), their ratio, and the largest difference of a
score between the two (float rounding only). Threads: 1 by default, as a job of a local run.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))

from bench_judging import serve_judge  # noqa: E402

from sparta.backends import hf  # noqa: E402
from sparta.judging import ADDITIVE_RUBRIC, JudgeItem, judge_answers, judge_duels, meta_judge  # noqa: E402
from sparta.settings import JudgeSettings  # noqa: E402

SYSTEM = "You are a helpful AI assistant."


def answers(row, n: int) -> list[str]:
    """The worked solution and n - 1 wrong variants of it."""
    right = str(row.answer)
    out = [row.solution]
    for d in range(1, n):
        wrong = str(int(float(right)) + d)
        out.append(row.solution.replace(right, wrong))
    return out


def workloads(judge, rows: pd.DataFrame) -> dict:
    cfg = JudgeSettings(mode="expected", max_length=1024, batch_size=8)
    pair_cfg = JudgeSettings(mode="expected", format="pairwise", max_length=1024, batch_size=8)
    duels = [JudgeItem(r.prompt, a) for r in rows.itertuples() for a in answers(r, 2)]
    four = [JudgeItem(r.prompt, a) for r in rows.itertuples() for a in answers(r, 4)]
    five = [
        JudgeItem(r.prompt, a)
        for r in rows.itertuples()
        for x, y in itertools.combinations(answers(r, 5), 2)
        for a in (x, y)
    ]
    judgments = [
        f"The response works through the problem step by step. {x} Its arithmetic is "
        f"{'right' if k == 0 else 'wrong at one step'}, so it earns {3 - k} points."
        for k, x in enumerate(("It is clear.", "It is short.", "It is long."))
    ]
    users = [f"Review the response to: {r.prompt}\n\n{r.solution}" for r in rows.itertuples()]
    meta_users, meta_pairs = [], []
    for user in users:
        for x, y in itertools.permutations(judgments, 2):
            meta_users.append(user)
            meta_pairs.append((x, y))
    return {
        "sparta": lambda: [j.score for j in judge_duels(judge, duels, cfg, SYSTEM)],
        "self_rewarding": lambda: [
            j.score for j in judge_answers(judge, four, cfg, SYSTEM, rubric=ADDITIVE_RUBRIC)
        ],
        "sppo": lambda: [j.score for j in judge_duels(judge, five, pair_cfg, SYSTEM)],
        "meta_rewarding": lambda: [p for p, _ in meta_judge(judge, meta_users, meta_pairs, cfg, SYSTEM)],
    }


class Counting:
    """The judge, counting the tokens its scoring computes (rows of the shared layout)."""

    def __init__(self, served):
        self.served, self.tok, self.tokens, self.requests = served, served.tok, 0, 0

    def continuation_logprobs(self, prompts, conts, batch_size=8):
        segments = hf._segments(prompts, None, batch_size)
        self.tokens += sum(hf._row_length(s, prompts, conts) for s in segments)
        self.requests += len(prompts)
        return self.served.continuation_logprobs(prompts, conts, batch_size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--judge", default=None, help="model folder or hub id (default: the SmolLM2 base)")
    ap.add_argument("--only", nargs="*", default=None, help="workloads to run (default: all)")
    args = ap.parse_args()
    spec, served = serve_judge(args.judge, args.threads)
    rows = pd.read_json(REPO / "data" / "arithmetic.jsonl", lines=True).head(args.prompts)
    print(
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), "
        f"{args.prompts} prompts, judge {spec.base}"
    )
    judge = Counting(served)
    runs = {k: v for k, v in workloads(judge, rows).items() if args.only is None or k in args.only}
    print(
        f"{'workload':<16}{'requests':>9}{'tokens alone':>14}{'shared':>9}{'s alone':>9}{'s shared':>9}"
        f"{'speed-up':>9}{'max |d score|':>14}"
    )
    share = hf.SHARED_PREFIX_MIN
    for name, run in runs.items():
        figures = {}
        for mode in ("alone", "shared", "alone", "shared"):  # alternating: drift hits both
            hf.SHARED_PREFIX_MIN = share if mode == "shared" else 10**9
            judge.tokens = judge.requests = 0
            t0 = time.perf_counter()
            scores = run()
            took = time.perf_counter() - t0
            best = figures.get(mode, (None, float("inf")))[1]
            figures[mode] = (scores, min(best, took), judge.tokens, judge.requests)
        hf.SHARED_PREFIX_MIN = share
        alone, shared = figures["alone"], figures["shared"]
        diff = max(
            (abs(a - b) for a, b in zip(alone[0], shared[0]) if a is not None and b is not None), default=0.0
        )
        print(
            f"{name:<16}{alone[3]:>9}{alone[2]:>14,}{shared[2]:>9,}{alone[1]:>9.1f}{shared[1]:>9.1f}"
            f"{alone[1] / shared[1]:>8.2f}x{diff:>14.2e}"
        )


if __name__ == "__main__":
    main()
