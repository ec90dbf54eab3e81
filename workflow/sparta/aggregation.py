"""A round's judgments aggregated (the paper's Aggregate), its duels settled one by one with
:func:`~sparta.reputation.settle_duel` (Eq. 1) and the preference pairs of the won duels.

Pure Python and numpy, as :mod:`sparta.reputation`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from . import tables
from .reputation import AggregationError, Duel, PoolState, ReputationSettings, Verdict, settle_duel
from .seeds import derive_seed


def weighted_mean(
    scores: Iterable[tuple[int, float | None]], state: PoolState, judge_weights: bool = True
) -> tuple[float | None, int]:
    """The paper's Aggregate: the mean of (judge index, score) pairs weighted by the judges'
    live reputations (times their down-weighting weights unless ``judge_weights`` is off);
    null scores are left out of numerator and denominator. Returns (mean, or None without
    weight; judges used)."""
    num = den = 0.0
    used = 0
    for j, s in scores:
        if s is None or math.isnan(s):
            continue
        w = state.reputation[j] * (state.weight[j] if judge_weights else 1.0)
        num += w * s
        den += w
        used += 1
    return (num / den if den > 0 else None), used


def paired_scores(side_a, side_b) -> tuple[list, list, int]:
    """The judgments of both sides by the judges that scored both answers; a judge with one
    usable score only is left out of both means. Returns (side a, side b, judges dropped)."""
    both = {j for j, _ in side_a} & {j for j, _ in side_b}
    kept_a = [(j, x) for j, x in side_a if j in both]
    kept_b = [(j, x) for j, x in side_b if j in both]
    return kept_a, kept_b, len(side_a) + len(side_b) - 2 * len(both)


def preference(state: PoolState, duel: Duel, verdict: Verdict, answers: tuple[str, str]) -> dict:
    """The preference pair of a duel won by a or b: the winner's answer chosen."""
    won_a, (ya, yb) = verdict.outcome == "a", answers
    a, b, s_a, s_b = duel.member_a, duel.member_b, verdict.score_a, verdict.score_b
    return {
        "iteration": state.iteration,
        "round": state.round,
        "duel_id": duel.duel_id,
        "prompt_id": duel.prompt_id,
        "prompt": duel.prompt,
        "chosen": ya if won_a else yb,
        "rejected": yb if won_a else ya,
        "chosen_member": a if won_a else b,
        "rejected_member": b if won_a else a,
        "chosen_score": s_a if won_a else s_b,
        "rejected_score": s_b if won_a else s_a,
        "margin": abs(s_a - s_b),
        "trainee": None,  # every member trains on Sparta's pairs
        "kind": "actor",
    }


SWAPPED_COLUMNS = (
    ("chosen", "rejected"),
    ("chosen_member", "rejected_member"),
    ("chosen_score", "rejected_score"),
)
"""The columns of a pair that random labels swap, two by two."""


def label_coin(seed: int, iteration: int, duel_id: str) -> bool:
    """The random_labels coin of one pair (``reputation.labels: random``): True swaps its chosen
    and rejected. Seeded by (seed, iteration, duel) through ``derive_seed`` and drawn by numpy,
    whose seeding mixes the bits (the parity of a CRC alone is linear in the duel id's bits)."""
    return bool(np.random.default_rng(derive_seed("random-labels", seed, iteration, duel_id)).random() < 0.5)


def swap_labels(pair: dict, seed: int) -> dict:
    """A pair with chosen and rejected (texts, members, scores) swapped where :func:`label_coin`
    says; the margin and everything else stay."""
    if not label_coin(seed, pair["iteration"], pair["duel_id"]):
        return pair
    swapped = dict(pair)
    for a, b in SWAPPED_COLUMNS:
        swapped[a], swapped[b] = pair[b], pair[a]
    return swapped


def _usable_judgments(state: PoolState, duels: pd.DataFrame, judgments: pd.DataFrame):
    """Check a round's duels and judgments against the pool and each other; return the
    usable judgments as arrays (duel position, side 0 = a / 1 = b, judge index, score)."""
    members = pd.Index(state.members)
    a_idx = members.get_indexer(duels["member_a"])
    b_idx = members.get_indexer(duels["member_b"])
    bad = sorted(set(duels["member_a"][a_idx < 0]) | set(duels["member_b"][b_idx < 0]))
    if bad:
        raise AggregationError(f"duels name unknown member(s) {bad}; pool is {state.members}")
    if (a_idx == b_idx).any():
        raise AggregationError("a duel pairs a member with itself")
    if duels["duel_id"].duplicated().any():
        raise AggregationError("duel ids repeat within the round")

    pos = pd.Index(duels["duel_id"]).get_indexer(judgments["duel_id"])
    if (pos < 0).any():
        extra = sorted(set(judgments["duel_id"][pos < 0]))[:5]
        raise AggregationError(f"judgments refer to duel(s) not in this round: {extra}")
    judge = members.get_indexer(judgments["judge"])
    if (judge < 0).any():
        unknown = sorted(set(judgments["judge"][judge < 0]))
        raise AggregationError(f"judgments name unknown judge(s) {unknown}; pool is {state.members}")
    target = members.get_indexer(judgments["target"])
    side = np.where(target == a_idx[pos], 0, np.where(target == b_idx[pos], 1, -1))
    if (side < 0).any():
        row = judgments[side < 0].iloc[0]
        raise AggregationError(
            f"judgment of {row['judge']} in duel {row['duel_id']} targets {row['target']}, "
            f"who is not in that duel"
        )
    score = judgments["score"].to_numpy(dtype=float, na_value=np.nan)
    usable = np.isfinite(score) & (judge != a_idx[pos]) & (judge != b_idx[pos])
    out_of_range = usable & ((score < 1) | (score > 10))
    if out_of_range.any():
        raise AggregationError(f"judge scores must lie in [1, 10]; got {score[out_of_range][:5]}")
    key = (pos * 2 + side) * len(members) + judge
    if pd.Series(key).duplicated().any():
        raise AggregationError("a judge scored the same response of a duel twice")
    return pos[usable], side[usable], judge[usable], score[usable]


def _scores_by_side(n_duels: int, pos, side, judge, score) -> list[list[tuple[int, float]]]:
    """Usable (judge, score) pairs of each (duel, side) slot, judges in pool order."""
    order = np.lexsort((judge, side, pos))
    slots: list[list[tuple[int, float]]] = [[] for _ in range(2 * n_duels)]
    for s, j, x in zip((pos * 2 + side)[order].tolist(), judge[order].tolist(), score[order].tolist()):
        slots[s].append((j, x))
    return slots


def aggregate_round(
    state: PoolState,
    duels: pd.DataFrame,
    responses: pd.DataFrame,
    judgments: pd.DataFrame,
    params: ReputationSettings,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Aggregate one round's judgments and update ``state`` duel by duel, in table order.

    Returns (history rows, preference pairs, counts). Each duel uses the judges' live
    reputations and is decided at its own time (Algorithm 1); ties are dropped and counted.
    Both aggregated scores of a duel are means over the same judges. A decided duel whose two
    answers are the same text updates the reputations but makes no pair (DPO would learn
    nothing from it), counted as ``identical``. With ``labels: random`` each pair's chosen and
    rejected are swapped where its seeded coin says (:func:`swap_labels`, counted as
    ``swapped``); the history and the reputations are the judged ones.
    """
    if len(duels):
        state.round = int(duels["round"].iloc[0])
    slots = _scores_by_side(len(duels), *_usable_judgments(state, duels, judgments))
    texts = dict(zip(zip(responses["duel_id"], responses["member"]), responses["response"]))
    history, prefs = [], []
    counts = {"duels": len(duels), "a": 0, "b": 0, "tie": 0, "no_verdict": 0, "identical": 0}
    cols = [duels[c].tolist() for c in ("duel_id", "prompt_id", "prompt", "member_a", "member_b")]
    judge_weights = params.downweight_target == "judge"
    for d, duel in enumerate(Duel(*c) for c in zip(*cols)):
        side_a, side_b, dropped = paired_scores(slots[2 * d], slots[2 * d + 1])
        s_a, n_judges = weighted_mean(side_a, state, judge_weights)
        s_b = weighted_mean(side_b, state, judge_weights)[0]
        verdict = Verdict(s_a, s_b, n_judges, dropped, params.min_gap)
        history.append(settle_duel(state, duel, verdict, params))
        counts[verdict.outcome] += 1
        if verdict.outcome in ("a", "b"):
            did, a, b = duel.duel_id, duel.member_a, duel.member_b
            ya, yb = texts.get((did, a)), texts.get((did, b))
            if ya is None or yb is None:
                raise AggregationError(f"duel {did} has judgments but no response of {a}/{b}")
            if ya == yb:
                counts["identical"] += 1
                continue
            prefs.append(preference(state, duel, verdict, (ya, yb)))
    if params.labels == "random":
        if params.labels_seed is None:
            raise AggregationError("reputation.labels: random needs labels_seed (the run's seed)")
        judged, prefs = prefs, [swap_labels(p, params.labels_seed) for p in prefs]
        counts["swapped"] = sum(p is not q for p, q in zip(prefs, judged))
    return tables.frame(history, "history"), tables.frame(prefs, "preferences"), counts
