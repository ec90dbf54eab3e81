"""What a pointwise judge writes right after its verdict's digit, and how far a score read from
the verdict's first token alone lies from the exact expected score (the one sparta reads): the
first-token score needs one pass over the judge prompt (plus one token for "1" against "10"),
the exact one a context per candidate digit, which vLLM computes as 10 requests.

    python benchmarks/bench_verdicts.py --members 'RUN/iter_0/members/*/member.json' \\
        --round RUN/iter_1/round_0 [--answers 24]

Every member judges ``--answers`` answers of the finished round (its duels' prompts and the
members' responses), pointwise in expected mode with the default judge settings, on the
Hugging Face backend. Printed: the probability of "}" after each digit 2-9 (quantiles over
judgments and digits), the most likely tokens there, and the difference between the two
scores (largest and mean, on the 1-10 scale).
"""

from __future__ import annotations

import argparse
import glob
import math
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

SYSTEM = "You are a helpful AI assistant."
PROBES = ("}", "},", "}\n", ",", ',"', ".", " ", "\n", "0", "5")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", required=True, help="glob of member.json files (one base)")
    ap.add_argument("--round", required=True, help="a finished round's folder (duels.parquet, responses/)")
    ap.add_argument("--answers", type=int, default=24, help="answers each member judges")
    args = ap.parse_args()

    import numpy as np
    import pandas as pd

    from sparta.backends import open_backend
    from sparta.chat import chat_ids
    from sparta.judging import SPARTA_RUBRIC, JudgeItem
    from sparta.judging.judge import _candidate_logprobs, _duel_requests, _expectation
    from sparta.judging.prompts import ASSISTANT_PREFIX, Rubric
    from sparta.members import MemberSpec
    from sparta.models import cpu_features
    from sparta.settings import BackendSettings, JudgeSettings, Runtime

    specs = [MemberSpec.read(p) for p in sorted(glob.glob(args.members))]
    runtime = Runtime(seed=0, device="cpu", dtype="float32", system_prompt=SYSTEM)
    backend = open_backend(BackendSettings("hf"), runtime, specs)
    folder = Path(args.round)
    duels = pd.read_parquet(folder / "duels.parquet").set_index("duel_id")
    responses = pd.concat([pd.read_parquet(p) for p in sorted(folder.glob("responses/*.parquet"))])
    items = [JudgeItem(duels.loc[r.duel_id, "prompt"], r.response) for r in responses.itertuples()]
    items = items[: args.answers]
    cfg = JudgeSettings(mode="expected", format="pointwise")
    first_token = Rubric("first token", "", ASSISTANT_PREFIX, "", SPARTA_RUBRIC.points)  # "1" ... "10"
    closing, after, diffs = [], Counter(), []
    for spec in specs:
        judge = backend.serve(spec)
        built, _, labels = _duel_requests(
            judge, items, cfg, SYSTEM, prefix=ASSISTANT_PREFIX, rubric=SPARTA_RUBRIC, tables=None
        )
        exact, first = (  # "d}", and "d" alone
            _candidate_logprobs(judge, built, labels, cfg, SYSTEM, prefix=ASSISTANT_PREFIX, rubric=rubric)
            for rubric in (SPARTA_RUBRIC, first_token)
        )
        for e, f in zip(exact, first):
            # the verdict's first token: "d" for 2-9, "1" not followed by "0", "10"
            one = math.log(max(1e-300, math.exp(f[0]) - math.exp(f[9])))
            points = SPARTA_RUBRIC.points  # 1-10: the scale itself
            diffs.append(_expectation([one, *f[1:]], points)[0] - _expectation(e, points)[0])
            closing += [math.exp(e[k] - f[k]) for k in range(1, 9)]  # P("}" | prompt, digit)
        # what follows a digit 2-9, on the first answers: each probe token's probability
        users = [user for user, _, _ in built[:4]]
        prompts = [
            chat_ids(judge.tok, u, SYSTEM, ASSISTANT_PREFIX + d, plain=cfg.plain_text)
            for u in users
            for d in "23456789"
        ]
        probes = [ids for t in PROBES if len(ids := judge.tok(t, add_special_tokens=False)["input_ids"]) == 1]
        for row in judge.continuation_logprobs(prompts, [probes] * len(prompts)):
            for ids, lp in zip(probes, row):
                after[judge.tok.decode(ids)] += math.exp(lp) / len(prompts) / len(specs)
    q = np.quantile(closing, [0.1, 0.5, 0.9])
    d = np.abs(np.array(diffs))
    print(f"CPU: {cpu_features()}; {len(specs)} judges x {len(items)} answers = {len(diffs)} judgments")
    print(f'P("}}" | prompt, digit 2-9): 10% {q[0]:.3f}, median {q[1]:.3f}, 90% {q[2]:.3f}')
    print(
        "after a digit 2-9 (mean probability):", ", ".join(f"{t!r} {v:.2f}" for t, v in after.most_common())
    )
    print(f"first-token score - exact score: largest |difference| {d.max():.2f}, mean {d.mean():.2f}")


if __name__ == "__main__":
    main()
