"""SPPO (Wu et al. 2024, "Self-Play Preference Optimization for Language Model Alignment",
arXiv 2405.00675; official code github.com/uclaml/SPPO).

Each member samples K = ``baselines.samples`` answers per prompt (default 5, as the official
runs); an annotator compares every two answers of a prompt (pairwise, expected mode, both
orders), giving P(i beats j). An answer's win probability is its mean P(beats j) over all K
answers, itself included at 1/2: (sum over j != i of P_ij + 1/2) / K, as the official code
estimates it. Chosen = the highest, rejected = the lowest win probability; SPPO's squared
loss (eq. 4.7, :func:`sparta.train.sppo_loss`) trains on them with eta = ``baselines.sppo_eta``
(official runs: beta = 1e-3 = 1/eta), not DPO's beta; ``baselines.sppo_loss: sppo_hard`` is TRL's.

Deliberate differences: the annotator is a language model judge (``baselines.annotator``, any
model folder; default the members' base model without adapter), not PairRM; every member
aligns alone; the win probabilities are stored as scores 1 + 9 P in ``judgments``. A
comparison the annotator fails (no usable verdict in either order; PairRM always gives one)
counts as P = 1/2; each answer's row says in ``error`` how many of its K - 1 comparisons
failed (its score stays usable), and ``truncated`` when any of its comparisons shortened an
answer.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

from ..judging import JudgeItem, Judgment, judge_duels, reference_win_probability
from ..members import MemberSpec
from .base import Method, best_and_worst_pairs


class SPPO(Method):
    name = "sppo"
    default_samples = 5
    judgment_owner = "target"  # the annotator judges; the row belongs to the judged member's job

    def judgment_format(self, cfg) -> str:
        return "pairwise"

    def judge(self, run) -> None:
        pairwise = replace(run.cfg, format="pairwise", mode="expected")
        asked, judged = [], []
        # one call per member: every member's annotator is "annotator", and a call draws one
        # label table per judge and prompt, so a pool job's single call would give all members'
        # comparisons of a prompt one table where member jobs give each its own
        for mine in _comparisons(run):
            asked += mine
            seed = lambda i, mine=mine: run.seed("annotator", *mine[i][1:4])
            judged += run.judged(mine, judge_duels, pairwise, seed)
        if run.reference:  # P(first beats second) from the two answers' reference scores, as 1 + 9 P
            for k in range(0, len(asked), 2):
                a_, b_ = judged[k], judged[k + 1]
                p = reference_win_probability(a_.score, b_.score)
                failed = None if None not in (a_.score, b_.score) else (a_.error or b_.error)
                judged[k] = replace(a_, score=None if failed else 1 + 9 * p, error=failed)
        beats, failed, cut, tokens, requests = _tallied(asked, judged)
        for (member, duel), p in beats.items():
            samples = sorted({x for pair in p for x in pair})
            # the prompt's tokens and requests shared over its K answers, summing to the totals
            tok, req = (share(total[(member, duel)], len(samples)) for total in (tokens, requests))
            lost, shortened = failed.get((member, duel), {}), cut.get((member, duel), set())
            for q, (k, w) in enumerate(win_rates(p, samples).items()):
                raw = {"win_rate": w, "p_beats": {f"{i}>{j}": v for (i, j), v in p.items()}}
                mine = [(i, j) for i, j in lost if k in (i, j)]
                if lost:
                    raw["failed"] = {f"{i}>{j}": e for (i, j), e in lost.items()}
                error = failed_comparisons(len(mine), len(samples) - 1, [lost[c] for c in mine])
                truncated = any(k in c for c in shortened)
                # req[q]: K (K - 1) requests over K answers
                judgment = Judgment(1 + 9 * w, json.dumps(raw), error, truncated, False, tok[q], req[q])
                run.add("annotator", duel, member, k, judgment)

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        """The answers with the highest and the lowest win probability (scores 1 + 9 P)."""
        return best_and_worst_pairs(duels, responses, judgments)

    def loss(self, baselines) -> str:
        return baselines.sppo_loss


def _comparisons(run) -> list[list[tuple]]:
    """Per member, every two answers of a prompt, each comparison as two items (the first
    answer, the second): (annotator, duel id, member, (i, j), item). The annotator is
    ``baselines.annotator``, or the member's base without adapter."""
    a = run.baselines.annotator
    out = []
    for spec in run.specs:
        annotator = MemberSpec("annotator", a.base if a else spec.base, a.adapter if a else None)
        asked = []
        for d in run.duels[run.duels["member_a"] == spec.name].itertuples(index=False):
            for i, j in itertools.combinations(run.samples_of(d.duel_id, spec.name), 2):
                items = [JudgeItem(d.prompt, run.text[(d.duel_id, spec.name, x)]) for x in (i, j)]
                asked += [(annotator, d.duel_id, spec.name, (i, j), item) for item in items]
        out.append(asked)
    return out


def _tallied(asked: list[tuple], judged: list) -> tuple[dict, dict, dict, dict, dict]:
    """Per (member, duel): P(i beats j) of each comparison, the comparisons that failed (with
    why), those that shortened an answer, and the tokens and requests they cost. A failed
    comparison (no usable verdict in either order) counts as P = 1/2."""
    beats, failed, cut, tokens, requests = {}, {}, {}, {}, {}
    for k in range(0, len(asked), 2):
        _, duel, member, (i, j), _ = asked[k]
        key, score = (member, duel), judged[k].score
        beats.setdefault(key, {})[(i, j)] = 0.5 if score is None else (score - 1) / 9
        if score is None:
            failed.setdefault(key, {})[(i, j)] = judged[k].error or "no usable verdict"
        if judged[k].truncated or judged[k + 1].truncated:
            cut.setdefault(key, set()).add((i, j))
        tokens[key] = tokens.get(key, 0) + judged[k].tokens + judged[k + 1].tokens
        # a comparison asked in both orders: 2 requests (none for the reference judge)
        requests[key] = requests.get(key, 0) + judged[k].requests + judged[k + 1].requests
    return beats, failed, cut, tokens, requests


def failed_comparisons(n: int, of: int, errors: list[str]) -> str | None:
    """The error of an answer's row when ``n`` of its ``of`` comparisons gave no usable
    verdict (each counted as P = 1/2); None when none failed."""
    if not n:
        return None
    return f"{n} of {of} comparisons failed, P = 1/2 used: {'; '.join(dict.fromkeys(errors))}"


def share(total: int, k: int) -> list[int]:
    """``total`` split into ``k`` whole parts that differ by at most one and sum to it."""
    base, extra = divmod(total, k)
    return [base + (q < extra) for q in range(k)]


def win_rates(p_beats: dict[tuple[int, int], float], samples: list[int]) -> dict[int, float]:
    """SPPO's win probability of each of the K answers, as its official code estimates it:
    (sum over j != i of P(i beats j) + 1/2) / K, from P(i beats j) for i < j."""
    rates = {}
    for i in samples:
        wins = [p_beats[(i, j)] if (i, j) in p_beats else 1 - p_beats[(j, i)] for j in samples if j != i]
        rates[i] = (sum(wins) + 0.5) / (len(wins) + 1)
    return rates
