"""Who fights whom: the paper's match-making system (section 2), pure and seeded.

Prompts of an iteration are drawn, split into rounds, and given a first combatant so that
in every block of m prompts (m = pool size) each member is first once, as the authors'
code does. The opponent is drawn per duel: with probability alpha uniformly among the other
members, otherwise uniformly among the k members whose reputation is closest.

All randomness comes from numpy Generators derived from (seed, iteration, round, stream),
so the same inputs give the same duel table on any machine.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from . import tables
from .fields import check_fields, setting

# independent random streams; changing one never shifts another
_STREAM_PROMPTS = 0
_STREAM_FIRSTS = 1
STREAM_OPPONENTS = 2


class PoolError(ValueError):
    """The pool or the match-making settings cannot work."""


@dataclass(frozen=True)
class MatchSettings:
    """Who fights whom (paper section 2; defaults from the paper's run script)."""

    alpha: float = setting(
        0.6,
        ge=0,
        le=1,
        help="Probability that the opponent is drawn uniformly from the other members.",
        constant="alpha (uniform opponent)",
        source="paper",
    )
    top_k: int = setting(
        5,
        ge=1,
        help="Otherwise the opponent is drawn among the k members closest in reputation.",
        constant="top-k closest opponents",
        source="paper",
    )
    randomness: bool = setting(
        True, help="Ablation 'w/o randomness in match' when false: alpha is 0 (always top-k)."
    )
    top_k_restriction: bool = setting(
        True, help="Ablation 'w/o top-k match' when false: every opponent is uniform (alpha 1)."
    )
    rounds_per_iteration: int = setting(
        1,
        ge=1,
        help="Rounds per iteration, each matched on the reputations after the previous one "
        "(authors 1; one duel per round is Algorithm 1 literally).",
        constant="rounds per iteration",
        source="authors' code",
    )

    def __post_init__(self):
        check_fields(self, PoolError, "matchmaking ")

    @property
    def effective_alpha(self) -> float:
        if not self.top_k_restriction:
            return 1.0
        if not self.randomness:
            return 0.0
        return self.alpha


def check_pool(members: Sequence[str]) -> list[str]:
    members = list(members)
    if len(members) < 3:
        raise PoolError(
            f"a Sparta pool needs at least 3 members (2 combatants and 1 judge), got "
            f"{len(members)}: {members}"
        )
    dupes = sorted({m for m in members if members.count(m) > 1})
    if dupes:
        raise PoolError(f"member names must be unique; repeated: {dupes}")
    return members


def rng_for(seed: int, iteration: int, round_: int, stream: int) -> np.random.Generator:
    """The Generator of one (seed, iteration, round, stream); independent of all others."""
    return np.random.default_rng(np.random.SeedSequence([seed, iteration, round_, stream]))


Schedule = Literal["fixed", "resample"]
"""How prompts are drawn each iteration (the type of prompts.schedule)."""
SCHEDULES = typing.get_args(Schedule)


def draw_prompts(
    prompts: pd.DataFrame, n: int, seed: int, iteration: int, schedule: str = "fixed"
) -> pd.DataFrame:
    """The prompts of one iteration: n drawn without replacement (all, shuffled, if n >= len).

    ``fixed`` (Algorithm 1, the authors' code): the same prompts, in the same order, every
    iteration. ``resample``: a new draw every iteration."""
    if len(prompts) == 0:
        raise PoolError("the prompt table is empty")
    if schedule not in SCHEDULES:
        raise PoolError(f"prompts.schedule must be one of {SCHEDULES}, got {schedule!r}")
    rng = rng_for(seed, iteration if schedule == "resample" else 0, 0, _STREAM_PROMPTS)
    order = rng.permutation(len(prompts))[: min(n, len(prompts))]
    return prompts.iloc[order].reset_index(drop=True)


def first_combatants(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Member indices of the first combatant of n duels: each member first once per block of m."""
    blocks = [rng.permutation(m) for _ in range(-(-n // m))]
    return np.concatenate(blocks)[:n] if blocks else np.zeros(0, dtype=int)


def round_sizes(n: int, rounds: int) -> list[int]:
    """Split n duels into `rounds` contiguous rounds of near-equal size (earlier ones larger)."""
    if rounds < 1:
        raise PoolError(f"rounds_per_iteration must be >= 1, got {rounds}")
    base, extra = divmod(n, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


def plan_iteration(
    prompts: pd.DataFrame,
    members: Sequence[str],
    n_prompts: int,
    rounds: int,
    seed: int,
    iteration: int,
    *,
    schedule: str = "fixed",
) -> pd.DataFrame:
    """Prompts, round and first combatant of every duel of an iteration (opponents come later,
    per round, from the reputations at the start of that round)."""
    members = check_pool(members)
    drawn = draw_prompts(prompts, n_prompts, seed, iteration, schedule)
    firsts = first_combatants(len(drawn), len(members), rng_for(seed, iteration, 0, _STREAM_FIRSTS))
    sizes = round_sizes(len(drawn), rounds)
    plan = drawn.copy()
    plan["iteration"] = iteration
    plan["round"] = np.repeat(np.arange(len(sizes)), sizes)
    plan["position"] = np.arange(len(drawn))
    plan["member_a"] = [members[i] for i in firsts]
    return plan


def pick_opponent(
    first: int, reputations: np.ndarray, params: MatchSettings, rng: np.random.Generator
) -> tuple[int, str, list[int]]:
    """The opponent of member ``first`` (never ``first`` itself): (index, branch, candidates),
    branch ``uniform`` (probability alpha) or ``top_k``, candidates the indices it was drawn
    from uniformly.

    It consumes the same randomness whatever the branch (m + 1 uniforms), so one duel's
    branch never shifts the draws of the duels after it.
    """
    m = len(reputations)
    others = np.array([j for j in range(m) if j != first])
    u, pick = rng.random(2)
    tiebreak = rng.random(len(others))
    branch = "uniform" if u < params.effective_alpha else "top_k"
    if branch == "uniform":
        pool = others
    else:
        k = min(int(params.top_k), len(others))
        distance = np.abs(reputations[others] - reputations[first])
        # ties in distance are broken at random, so equal reputations favour nobody
        pool = others[np.lexsort((tiebreak, distance))[:k]]
    return int(pool[int(pick * len(pool))]), branch, sorted(int(j) for j in pool)


def match_round(
    plan: pd.DataFrame,
    members: Sequence[str],
    reputations: Mapping[str, float],
    params: MatchSettings,
    seed: int,
    round_: int,
) -> pd.DataFrame:
    """The duel table of one round: the planned duels of that round with their opponents,
    drawn against the reputations at the start of the round."""
    members = check_pool(members)
    missing = [m for m in members if m not in reputations]
    if missing:
        raise PoolError(f"no reputation for member(s) {missing}")
    rep = np.array([float(reputations[m]) for m in members])
    index = {m: i for i, m in enumerate(members)}
    rows = plan[plan["round"] == round_]
    if len(rows) == 0:
        return tables.empty("duels")
    iteration = int(rows["iteration"].iloc[0])
    rng = rng_for(seed, iteration, round_, STREAM_OPPONENTS)
    picks = [pick_opponent(index[a], rep, params, rng) for a in rows["member_a"]]
    return pd.DataFrame(
        {
            "iteration": rows["iteration"].astype("int32").to_numpy(),
            "round": rows["round"].astype("int32").to_numpy(),
            "duel_id": [duel_id(iteration, p) for p in rows["position"]],
            "prompt_id": rows["prompt_id"].astype(str).to_numpy(),
            "prompt": rows["prompt"].astype(str).to_numpy(),
            "answer": rows["answer"].to_numpy() if "answer" in rows else None,
            "reference": rows["reference"].to_numpy() if "reference" in rows else None,
            "member_a": rows["member_a"].to_numpy(),
            "member_b": [members[j] for j, _, _ in picks],
            "opponent_branch": [branch for _, branch, _ in picks],
            "opponent_candidates": [[members[c] for c in pool] for _, _, pool in picks],
        }
    )


def duel_id(iteration: int, position: int) -> str:
    """Duel ids are unique across a run and sort in play order: ``t01-00042``."""
    return f"t{iteration:02d}-{position:05d}"
