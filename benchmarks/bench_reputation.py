"""Aggregation + Eq. (1) updates over many duels: prints duels per second.

Target (issue: Sparta core): 100,000 duels with 8 judges each (1.6 M judgments) in under
10 s on one core. Run: python benchmarks/bench_reputation.py [--duels N]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from sparta.aggregation import aggregate_round
from sparta.matchmaking import MatchSettings, match_round, plan_iteration
from sparta.reputation import PoolState, ReputationSettings, begin_iteration

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import judgment_row  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duels", type=int, default=100_000)
    ap.add_argument("--members", type=int, default=10, help="10 members -> 8 judges a duel")
    ap.add_argument("--null-share", type=float, default=0.05, help="share of unusable judgments")
    args = ap.parse_args()
    members = [f"m{i}" for i in range(args.members)]
    prompts = pd.DataFrame(
        {"prompt_id": [f"p{i}" for i in range(args.duels)], "prompt": "x", "answer": None, "domain": "bench"}
    )

    t0 = time.perf_counter()
    plan = plan_iteration(prompts, members, args.duels, 1, seed=0, iteration=1)
    duels = match_round(plan, members, {m: 100.0 for m in members}, MatchSettings(), 0, 0)
    t_match = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    n, m = len(duels), len(members)
    a = pd.Index(members).get_indexer(duels["member_a"])
    b = pd.Index(members).get_indexer(duels["member_b"])
    judge = np.tile(np.arange(m), n)
    duel = np.repeat(np.arange(n), m)
    keep = (judge != a[duel]) & (judge != b[duel])
    duel, judge = duel[keep], judge[keep]
    duel, judge = np.concatenate([duel, duel]), np.concatenate([judge, judge])
    target = np.concatenate([a[duel[: len(duel) // 2]], b[duel[len(duel) // 2 :]]])
    score = rng.integers(1, 11, len(duel)).astype(float)
    score[rng.random(len(duel)) < args.null_share] = np.nan
    ids = duels["duel_id"].to_numpy()
    names = np.array(members)
    judgments = pd.DataFrame(judgment_row(ids[duel], names[judge], names[target], score))
    responses = pd.DataFrame(
        {
            "duel_id": np.repeat(ids, 2),
            "member": np.stack([duels["member_a"], duels["member_b"]], 1).ravel(),
            "response": "r",
            "n_tokens": 1,
            "finish_reason": "stop",
            "sample": 0,
        }
    )

    params = ReputationSettings()
    state = begin_iteration(PoolState.initial(members, params), 1, params)
    t0 = time.perf_counter()
    hist, prefs, counts = aggregate_round(state, duels, responses, judgments, params)
    t_agg = time.perf_counter() - t0
    print(f"duels={n} judgments={len(judgments)} members={m}")
    print(f"matchmaking: {t_match:.2f} s ({n / t_match:,.0f} duels/s)")
    print(f"aggregation + Eq.1 updates + preferences: {t_agg:.2f} s ({n / t_agg:,.0f} duels/s)")
    print(f"outcomes: {counts}; pairs: {len(prefs)}")


if __name__ == "__main__":
    main()
