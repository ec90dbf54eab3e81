"""Judgments generated in batches of different sizes (``judge.generate_batch_size``), on the
workload of meta-rewarding's sampled judgments with reasons: the additive 5-point prompt of
sparta/judging/prompts.py, ``--samples`` sampled judgments of each answer, up to ``--max-new-tokens``
tokens each, the SmolLM2 base as the judge:

    python benchmarks/bench_judge_generate.py [--prompts 16] [--batch 8 48] [--threads 1]

Answers: the worked solutions of the first ``--prompts`` problems of data/arithmetic.jsonl,
half of them made wrong. Printed per batch size (one process, the sizes alternated twice,
the faster of each kept): seconds, judgments per second, generated tokens, the speed-up over
the first size, and whether every judgment's text is the same as with the first size (each
judgment samples from its own seed, so the batch must never change it). Threads: 1 by
default, as a job of a local run (two jobs side by side on 2 cores).

``--sharing``: at the last batch size, prompts prefilled as the backend does (the rubric every
prompt starts with once, each answer's prompt once for its samples, ``hf.SHARE_PROMPTS``)
against every row computed in full with left padding, alternated twice: seconds, speed-up,
and whether every judgment's text is the same.

``--decoding``: at the last batch size, three ways to decode, alternated twice: transformers'
``generate`` with its DynamicCache (which concatenates every layer's whole cache at every
step, and computes every row until the batch's longest judgment ends); ``generate`` with the
backend's cache that writes each step into room kept after its tokens (``hf.RoomyLayer``,
``hf.ROOMY_CACHE``); and the backend's own decoding, where a judgment that has ended leaves
the batch (``hf.OWN_DECODING``, the default). Seconds, speed-up over the first, and whether
every judgment's text is the same as the first's.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))

from bench_judging import serve_judge  # noqa: E402

from sparta.judging import ADDITIVE_RUBRIC, JudgeItem, judge_answers  # noqa: E402
from sparta.settings import JudgeSettings  # noqa: E402

SYSTEM = "You are a helpful AI assistant."


def items(rows: pd.DataFrame, samples: int) -> list[JudgeItem]:
    """Each problem's worked solution (every other one with its answer off by one), judged
    ``samples`` times."""
    out = []
    for k, r in enumerate(rows.itertuples()):
        right = str(r.answer)
        answer = r.solution if k % 2 == 0 else r.solution.replace(right, str(int(float(right)) + 1))
        out += [JudgeItem(r.prompt, answer)] * samples
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=3, help="judgments of each answer (meta_judgments)")
    ap.add_argument("--max-new-tokens", type=int, default=160, help="as workflow/configs/study-small.yaml")
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 48], help="generate batch sizes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--judge", default=None, help="model folder or hub id (default: the SmolLM2 base)")
    ap.add_argument("--sharing", action="store_true", help="shared prefill against full rows instead")
    ap.add_argument(
        "--decoding", action="store_true", help="generate/DynamicCache against the backend's decoding"
    )
    args = ap.parse_args()
    spec, judge = serve_judge(args.judge, args.threads)
    rows = pd.read_json(REPO / "data" / "arithmetic.jsonl", lines=True).head(args.prompts)
    asked = items(rows, args.samples)
    seeds = list(range(len(asked)))
    cfg = JudgeSettings(mode="generate", max_new_tokens=args.max_new_tokens, max_length=1024)
    print(
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), "
        f"{len(asked)} judgments ({args.prompts} answers x {args.samples}), up to "
        f"{args.max_new_tokens} new tokens, judge {spec.base}"
    )
    last = replace(cfg, generate_batch_size=args.batch[-1])
    if args.sharing:
        compare(judge, asked, last, seeds, {"full rows": {"SHARE_PROMPTS": False}, "shared prefill": {}})
        return
    if args.decoding:
        ways = {
            "generate, DynamicCache": {"OWN_DECODING": False, "ROOMY_CACHE": False},
            "generate, roomy cache": {"OWN_DECODING": False},
            "own decoding, roomy cache": {},
        }
        compare(judge, asked, last, seeds, ways)
        return
    best: dict[int, float] = {}
    texts: dict[int, list[str]] = {}
    generated: dict[int, int] = {}
    for size in args.batch * 2:  # alternated: the machine's drift hits every size
        run = replace(cfg, generate_batch_size=size)
        t0 = time.perf_counter()
        out = judge_answers(judge, asked, run, SYSTEM, seeds=seeds, rubric=ADDITIVE_RUBRIC)
        took = time.perf_counter() - t0
        best[size] = min(best.get(size, float("inf")), took)
        texts[size] = [j.raw for j in out]
        generated[size] = sum(j.generated for j in out)
    first = args.batch[0]
    head = f"{'batch':>6}{'s':>9}{'judgments/s':>13}{'tokens':>8}{'speed-up':>10}"
    print(f"{head}  same texts as batch {first}")
    for size in args.batch:
        print(
            f"{size:>6}{best[size]:>9.1f}{len(asked) / best[size]:>13.3f}{generated[size]:>8}"
            f"{best[first] / best[size]:>9.2f}x  {texts[size] == texts[first]}"
        )


def compare(judge, asked, cfg, seeds, ways: dict[str, dict[str, bool]]) -> None:
    """Each way (``hf`` module switches set off, the others at their defaults) alternated
    twice, the faster of each kept; speed-up and same texts against the first way."""
    from sparta.backends import hf

    defaults = {k: getattr(hf, k) for flags in ways.values() for k in flags}
    best: dict[str, float] = {}
    texts: dict[str, list[str]] = {}
    for name in list(ways) * 2:
        for k, v in defaults.items():
            setattr(hf, k, ways[name].get(k, v))
        t0 = time.perf_counter()
        out = judge_answers(judge, asked, cfg, SYSTEM, seeds=seeds, rubric=ADDITIVE_RUBRIC)
        best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
        texts[name] = [j.raw for j in out]
    for k, v in defaults.items():
        setattr(hf, k, v)
    first = next(iter(ways))
    print(f"batch {cfg.generate_batch_size}, {len(asked)} judgments (best of 2 each):")
    for name in ways:
        same = sum(a == b for a, b in zip(texts[name], texts[first]))
        print(
            f"  {name:<28}{best[name]:>7.1f} s {best[first] / best[name]:>6.2f}x  "
            f"{same} of {len(asked)} texts as {first}"
        )


if __name__ == "__main__":
    main()
