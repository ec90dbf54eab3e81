"""Algorithm 1 of the paper, literally: duel by duel, match-making on live reputations.

This is the reference the staged workflow (match a round, answer, judge, aggregate through
Parquet) is tested against: with one duel per round both must give the same history and
preference pairs (tests/test_sequential.py). It is test code, not a stage of the workflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from sparta.aggregation import preference, weighted_mean
from sparta.matchmaking import (
    STREAM_OPPONENTS,
    MatchSettings,
    duel_id,
    pick_opponent,
    plan_iteration,
    rng_for,
)
from sparta.reputation import Duel, PoolState, ReputationSettings, Verdict, begin_iteration, settle_duel
from sparta.tables import frame

Respond = Callable[[str, str], str]
"""respond(member, prompt) -> response"""
Judge = Callable[[str, str, str], "float | None"]
"""judge(judge_member, prompt, response) -> score in [1, 10], or None when unusable"""


def run_sequential(
    prompts: pd.DataFrame,
    members: Sequence[str],
    respond: Respond,
    judge: Judge,
    iterations: int,
    prompts_per_iteration: int,
    seed: int,
    match: MatchSettings,
    params: ReputationSettings,
) -> tuple[pd.DataFrame, pd.DataFrame, PoolState]:
    """Algorithm 1 with every duel its own round. Returns (history, preferences, final state)."""
    state = PoolState.initial(members, params)
    history, prefs = [], []
    for t in range(1, iterations + 1):
        begin_iteration(state, t, params)
        plan = plan_iteration(prompts, members, prompts_per_iteration, prompts_per_iteration, seed, t)
        for row in plan.itertuples(index=False):
            state.round = int(row.round)
            rng = rng_for(seed, t, state.round, STREAM_OPPONENTS)
            ia = state.index[row.member_a]
            a, b = row.member_a, state.members[pick_opponent(ia, np.array(state.reputation), match, rng)[0]]
            ya, yb = respond(a, row.prompt), respond(b, row.prompt)
            judges = [k for k in state.members if k not in (a, b)]
            # a judge counts only if both of its scores are usable; weights as the params say
            scores = [(state.index[k], judge(k, row.prompt, ya), judge(k, row.prompt, yb)) for k in judges]
            both = [(j, x, y) for j, x, y in scores if x is not None and y is not None]
            dropped = sum((x is None) != (y is None) for _, x, y in scores)
            judge_weights = params.downweight_target == "judge"
            s_a, n = weighted_mean([(j, x) for j, x, _ in both], state, judge_weights)
            s_b, _ = weighted_mean([(j, y) for j, _, y in both], state, judge_weights)
            duel = Duel(duel_id(t, int(row.position)), row.prompt_id, row.prompt, a, b)
            verdict = Verdict(s_a, s_b, n, dropped)
            history.append(settle_duel(state, duel, verdict, params))
            if verdict.outcome in ("a", "b"):
                prefs.append(preference(state, duel, verdict, (ya, yb)))
    return frame(history, "history"), frame(prefs, "preferences"), state
