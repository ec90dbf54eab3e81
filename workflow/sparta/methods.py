"""How each method turns an iteration's answers and judgments into preference pairs (pure).

``sparta``: duels between members, judged by the others (reputation.py). The four
self-alignment baselines of the paper's Table 1 align every member alone, over the same
stages and tables: each member answers every prompt of the iteration (``samples`` answers
per prompt), and its own pairs (``trainee`` = the member) are what it trains on.

- ``self_rewarding`` (Yuan et al. 2024): the member judges its own answers with the run's
  judge prompt and mode (generate mode: ``judge_samples`` judgments averaged, the paper's 3);
  chosen = the highest scored, rejected = the lowest; pairs less than ``min_margin`` apart
  (ties always) dropped.
- ``meta_rewarding`` (Wu et al. 2024): self-rewarding, plus the member as meta-judge: two of
  its judgments of the chosen answer are compared by the member itself, and the preferred
  judgment against the other is a judge pair (kind ``judge``); actor and judge pairs train
  together. ``length_control`` (rho): chosen = the shortest answer scored within rho of the
  best, rejected = the longest within rho of the worst.
- ``spin`` (Chen et al. 2024): chosen = the reference answer of the prompt file, rejected =
  the member's own answer; DPO against the previous iterate, on the pairs of the last
  ``spin_history`` iterations (SPIN's recipe: the current and the previous one).
- ``sppo`` (Wu et al. 2024): an annotator compares every two answers of a prompt (pairwise,
  both orders); an answer's win probability is its mean P(beats j) over all K answers j,
  itself included at 1/2 (as SPPO's official code); chosen = the highest, rejected = the
  lowest, trained with SPPO's squared loss with its own eta (``sppo_eta``) on those
  probabilities (stored as scores 1 + 9 P).

A baseline's duels table has one row per (member, prompt): the member against itself
(``model_a = model_b``, ``opponent_branch`` "self").
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd

from . import tables

METHODS = ("sparta", "self_rewarding", "meta_rewarding", "spin", "sppo")
BASELINES = METHODS[1:]
JUDGED_BY_SELF = ("self_rewarding", "meta_rewarding")


DEFAULT_SAMPLES = {"self_rewarding": 4, "meta_rewarding": 4, "sppo": 5}
"""Answers per prompt when ``baselines.samples`` is None: SPPO's official runs sample K = 5."""


def samples_per_prompt(method: str, samples: int | None) -> int:
    """Answers a member gives each prompt: two combatants answer once in Sparta; a baseline
    member answers ``samples`` times (None: the method's default), SPIN once."""
    if method in ("sparta", "spin"):
        return 1
    return DEFAULT_SAMPLES[method] if samples is None else samples


def trained_iterations(method: str, t: int, spin_history: int = 1) -> list[int]:
    """The iterations whose pairs the members train on at the end of iteration ``t``: ``t``
    alone, or for SPIN the last ``spin_history`` iterations up to ``t`` (its recipe trains
    iteration 2 on the pairs of iterations 1 and 2)."""
    if method != "spin":
        return [t]
    return list(range(max(1, t - spin_history + 1), t + 1))


def mean_judgment(samples: list):
    """One score from several sampled judgments of an answer (self-rewarding's averaging over
    its judge samples): the mean of the usable scores, None when none is; the raw texts kept
    as a JSON list, tokens summed, truncated/sanitized when any was."""
    from .judging import Judgment

    if len(samples) == 1:
        return samples[0]
    usable = [j.score for j in samples if j.score is not None]
    return Judgment(
        sum(usable) / len(usable) if usable else None,
        json.dumps({"samples": [j.raw for j in samples], "scores": [j.score for j in samples]}),
        None if usable else "; ".join(str(j.error) for j in samples),
        any(j.truncated for j in samples),
        any(j.sanitized for j in samples),
        sum(j.tokens for j in samples),
    )


def self_duels(plan: pd.DataFrame, members: list[str], iteration: int, round_: int) -> pd.DataFrame:
    """A baseline's duels of a round: every member against itself on every planned prompt."""
    from .matchmaking import duel_id

    rows = plan[plan["round"] == round_]
    out = []
    for m in members:
        for r in rows.itertuples(index=False):
            out.append(
                {
                    "iteration": iteration,
                    "round": round_,
                    "duel_id": f"{duel_id(iteration, int(r.position))}-{m}",
                    "prompt_id": str(r.prompt_id),
                    "prompt": str(r.prompt),
                    "answer": getattr(r, "answer", None),
                    "reference": getattr(r, "reference", None),
                    "model_a": m,
                    "model_b": m,
                    "opponent_branch": "self",
                    "opponent_candidates": [m],
                }
            )
    return pd.DataFrame(out, columns=tables.columns("duels")) if out else tables.empty("duels")


def _pair(duel, member, chosen, rejected, s_c, s_r, kind="actor", prompt=None) -> dict:
    return {
        "iteration": int(duel.iteration),
        "round": int(duel.round),
        "duel_id": duel.duel_id,
        "prompt_id": duel.prompt_id,
        "prompt": duel.prompt if prompt is None else prompt,
        "chosen": chosen,
        "rejected": rejected,
        "chosen_model": member,
        "rejected_model": member,
        "chosen_score": s_c,
        "rejected_score": s_r,
        "margin": s_c - s_r,
        "trainee": member,
        "kind": kind,
    }


def _scored(duels, responses, judgments) -> dict:
    """Per duel: [(sample, text, score)] of the member's answers (score from kind "score")."""
    score = judgments[judgments["kind"] == "score"].set_index(["duel_id", "sample"])["score"]
    out: dict[str, list] = {}
    for r in responses.itertuples(index=False):
        s = score.get((r.duel_id, int(r.sample)))
        out.setdefault(r.duel_id, []).append(
            (int(r.sample), r.response, None if s is None or pd.isna(s) else float(s))
        )
    return out


def best_and_worst(
    answers: list[tuple[int, str, float]], length_control: float | None = None, min_margin: float = 0.0
):
    """(chosen, rejected) of scored answers: the highest and the lowest score, or None when
    they tie, differ by less than ``min_margin``, or fewer than two answers have a score. With
    length control rho: the shortest answer within rho x range of the best, the longest within
    rho x range of the worst (their margin is checked again)."""
    scored = [a for a in answers if a[2] is not None]
    if len(scored) < 2:
        return None
    hi, lo = max(a[2] for a in scored), min(a[2] for a in scored)
    if hi == lo or hi - lo < min_margin:
        return None
    if length_control is None:
        chosen = max(scored, key=lambda a: (a[2], -a[0]))
        rejected = min(scored, key=lambda a: (a[2], a[0]))
    else:
        band = length_control * (hi - lo)
        chosen = min((a for a in scored if a[2] >= hi - band), key=lambda a: (len(a[1]), -a[2], a[0]))
        rejected = max((a for a in scored if a[2] <= lo + band), key=lambda a: (len(a[1]), -a[2], -a[0]))
        if chosen[2] <= rejected[2] or chosen[2] - rejected[2] < min_margin:
            return None
    return chosen, rejected


def self_rewarding_pairs(
    duels, responses, judgments, length_control: float | None = None, min_margin: float = 0.0
) -> list[dict]:
    """Actor pairs: each member's best and worst self-scored answer to each prompt, at least
    ``min_margin`` apart."""
    answers = _scored(duels, responses, judgments)
    pairs = []
    for d in duels.itertuples(index=False):
        picked = best_and_worst(answers.get(d.duel_id, []), length_control, min_margin)
        if picked:
            (_, yc, sc), (_, yr, sr) = picked
            pairs.append(_pair(d, d.model_a, yc, yr, sc, sr))
    return pairs


def meta_judge_pairs(duels, judgments) -> list[dict]:
    """Judge pairs of meta-rewarding: for each meta-judgment (kind "meta", raw: the judge's
    user message, its two judgments, P(first better)), the preferred judgment is chosen."""
    by_duel = duels.set_index("duel_id")
    pairs = []
    for j in judgments[judgments["kind"] == "meta"].itertuples(index=False):
        meta = json.loads(j.raw)
        p, (first, second) = meta.get("p_first"), meta["judgments"]
        if p is None or p == 0.5 or first == second:
            continue
        chosen, rejected = (first, second) if p > 0.5 else (second, first)
        row = SimpleNamespace(**by_duel.loc[j.duel_id].to_dict(), duel_id=j.duel_id)
        pairs.append(
            _pair(
                row,
                j.judge,
                chosen,
                rejected,
                1 + 9 * max(p, 1 - p),
                1 + 9 * min(p, 1 - p),
                "judge",
                meta["user"],
            )
        )
    return pairs


def spin_pairs(duels, responses) -> list[dict]:
    """Chosen = the prompt's reference answer, rejected = the member's own answer."""
    text = dict(zip(responses["duel_id"], responses["response"]))
    pairs = []
    for d in duels.itertuples(index=False):
        reference, own = d.reference, text.get(d.duel_id)
        if reference is None or pd.isna(reference) or own is None or own.strip() == str(reference).strip():
            continue
        pairs.append(_pair(d, d.model_a, str(reference), own, float("nan"), float("nan")))
    return pairs


def sppo_pairs(duels, responses, judgments) -> list[dict]:
    """The answers with the highest and the lowest win probability (scores 1 + 9 P)."""
    return self_rewarding_pairs(duels, responses, judgments)


def win_rates(p_beats: dict[tuple[int, int], float], samples: list[int]) -> dict[int, float]:
    """SPPO's win probability of each of the K answers against the policy's answers, as its
    official code estimates it: the mean of P(i beats j) over all K answers j, the answer itself
    included with P(i beats i) = 1/2, i.e. (sum over j != i of P(i beats j) + 1/2) / K; from
    P(i beats j) for i < j (P(j beats i) = 1 - P(i beats j))."""
    rates = {}
    for i in samples:
        wins = [p_beats[(i, j)] if (i, j) in p_beats else 1 - p_beats[(j, i)] for j in samples if j != i]
        rates[i] = (sum(wins) + 0.5) / (len(wins) + 1)
    return rates


def baseline_pairs(
    method: str,
    duels,
    responses,
    judgments,
    length_control: float | None = None,
    min_margin: float = 0.0,
) -> pd.DataFrame:
    if method == "self_rewarding":
        rows = self_rewarding_pairs(duels, responses, judgments, length_control, min_margin)
    elif method == "meta_rewarding":
        rows = self_rewarding_pairs(
            duels, responses, judgments, length_control, min_margin
        ) + meta_judge_pairs(duels, judgments)
    elif method == "spin":
        rows = spin_pairs(duels, responses)
    elif method == "sppo":
        rows = sppo_pairs(duels, responses, judgments)
    else:
        raise ValueError(f"{method} is not a baseline; methods: {METHODS}")
    return pd.DataFrame(rows, columns=tables.columns("preferences")) if rows else tables.empty("preferences")
