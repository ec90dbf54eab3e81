"""Match-making: balance, the alpha / top-k rule, seeding and errors."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparta import tables
from sparta.matchmaking import (
    MatchSettings,
    PoolError,
    check_pool,
    match_round,
    pick_opponent,
    plan_iteration,
    rng_for,
    round_sizes,
)


def prompts(n):
    return pd.DataFrame(
        {
            "prompt_id": [f"p{i}" for i in range(n)],
            "prompt": [f"q{i}" for i in range(n)],
            "answer": [str(i) for i in range(n)],
            "domain": "x",
        }
    )


def duels_for(members, reps, n, seed, params=MatchSettings(), iteration=1, rounds=1):
    plan = plan_iteration(prompts(n), members, n, rounds, seed, iteration)
    rep = dict(zip(members, reps))
    return pd.concat([match_round(plan, members, rep, params, seed, r) for r in range(rounds)])


def test_first_combatants_are_balanced_per_block():
    members = [f"m{i}" for i in range(5)]
    plan = plan_iteration(prompts(23), members, 23, 3, seed=7, iteration=2)
    for start in range(0, 20, 5):
        assert sorted(plan["member_a"][start : start + 5]) == members
    assert plan["round"].tolist() == [0] * 8 + [1] * 8 + [2] * 7
    assert round_sizes(7, 3) == [3, 2, 2]


def test_duel_table_fits_schema_and_ids_are_unique():
    members = ["a", "b", "c", "d"]
    d = duels_for(members, [100] * 4, 12, seed=1, rounds=2)
    tables.to_arrow(d, "duels")
    assert d["duel_id"].is_unique and d["duel_id"].is_monotonic_increasing


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 12),
    st.integers(0, 2**31),
    st.floats(0, 1),
    st.integers(1, 12),
    st.lists(st.floats(10, 200), min_size=12, max_size=12),
)
def test_never_pairs_a_member_with_itself(m, seed, alpha, k, reps):
    members = [f"m{i}" for i in range(m)]
    d = duels_for(members, reps[:m], 2 * m + 1, seed, MatchSettings(alpha=alpha, top_k=k))
    assert (d["member_a"] != d["member_b"]).all()
    assert set(d["member_b"]) <= set(members)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 12),
    st.integers(0, 2**31),
    st.integers(1, 6),
    st.lists(st.floats(10, 200), min_size=12, max_size=12),
)
def test_alpha_zero_draws_only_among_k_closest(m, seed, k, reps):
    reps = np.array(reps[:m])
    members = [f"m{i}" for i in range(m)]
    d = duels_for(members, reps, 3 * m, seed, MatchSettings(alpha=0.0, top_k=k))
    for a, b in zip(d["member_a"], d["member_b"]):
        i, j = members.index(a), members.index(b)
        others = np.delete(np.abs(reps - reps[i]), i)
        kth = np.sort(others)[min(k, m - 1) - 1]
        assert abs(reps[j] - reps[i]) <= kth


def test_alpha_zero_with_k1_picks_the_closest():
    members = ["a", "b", "c", "d"]
    d = duels_for(members, [100, 150, 104, 300], 40, seed=3, params=MatchSettings(alpha=0, top_k=1))
    closest = {"a": "c", "b": "c", "c": "a", "d": "b"}
    assert all(closest[a] == b for a, b in zip(d["member_a"], d["member_b"]))


def test_alpha_one_and_ablations_reach_everyone():
    members = ["a", "b", "c", "d", "e"]
    reps = [100, 101, 102, 500, 900]
    far = duels_for(members, reps, 200, seed=5, params=MatchSettings(alpha=1.0, top_k=1))
    assert set(far[far["member_a"] == "a"]["member_b"]) == {"b", "c", "d", "e"}
    no_topk = duels_for(members, reps, 200, 5, MatchSettings(alpha=0.0, top_k=1, top_k_restriction=False))
    assert set(no_topk[no_topk["member_a"] == "a"]["member_b"]) == {"b", "c", "d", "e"}
    no_rand = duels_for(members, reps, 200, 5, MatchSettings(alpha=1.0, top_k=1, randomness=False))
    assert set(no_rand[no_rand["member_a"] == "a"]["member_b"]) == {"b"}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 2**20))
def test_same_seed_same_duels_other_seed_different(seed, shift):
    members = [f"m{i}" for i in range(6)]
    reps = [100, 120, 90, 100, 130, 80]
    one = duels_for(members, reps, 30, seed)
    two = duels_for(members, reps, 30, seed)
    pd.testing.assert_frame_equal(one, two)
    other = duels_for(members, reps, 30, seed + shift)
    assert not one.equals(other)


def test_rng_streams_differ_by_iteration_and_round():
    draws = {(t, r): rng_for(42, t, r, 2).random() for t in (1, 2) for r in (0, 1)}
    assert len(set(draws.values())) == 4


def test_errors_name_the_problem():
    with pytest.raises(PoolError, match="at least 3 members"):
        check_pool(["a", "b"])
    with pytest.raises(PoolError, match="unique"):
        check_pool(["a", "b", "a"])
    with pytest.raises(PoolError, match="top_k"):
        MatchSettings(top_k=0)
    with pytest.raises(PoolError, match="alpha"):
        MatchSettings(alpha=1.5)
    with pytest.raises(PoolError, match="alpha"):
        MatchSettings(alpha=-0.1)
    with pytest.raises(PoolError, match="empty"):
        plan_iteration(prompts(0), ["a", "b", "c"], 5, 1, 0, 1)
    with pytest.raises(PoolError, match="no reputation"):
        match_round(
            plan_iteration(prompts(3), ["a", "b", "c"], 3, 1, 0, 1),
            ["a", "b", "c"],
            {"a": 100},
            MatchSettings(),
            0,
            0,
        )


def test_pick_opponent_randomness_does_not_depend_on_branch():
    """The opponent draw consumes the same randomness whatever the branch, so one duel's
    branch never shifts the next duel's draws."""
    reps = np.array([100.0, 100, 100, 100])
    r1, r2 = rng_for(0, 1, 0, 2), rng_for(0, 1, 0, 2)
    assert pick_opponent(0, reps, MatchSettings(alpha=0.0), r1)[1] == "top_k"
    assert pick_opponent(0, reps, MatchSettings(alpha=1.0), r2)[1] == "uniform"
    assert r1.random() == r2.random()
