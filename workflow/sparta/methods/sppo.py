"""SPPO (Wu et al. 2024, "Self-Play Preference Optimization for Language Model Alignment",
arXiv 2405.00675; official code github.com/uclaml/SPPO).

Each member samples K = ``baselines.samples`` answers per prompt (default 5, as the official
runs); an annotator compares every two answers of a prompt (pairwise, expected mode, both
orders), giving P(i beats j). An answer's win probability is its mean P(beats j) over all K
answers, itself included at 1/2: (sum over j != i of P_ij + 1/2) / K, as the official code
estimates it. Chosen = the highest, rejected = the lowest win probability; SPPO's squared
loss (eq. 4.7) trains on them, (log pi/pi_ref(y_w) - eta (P_w - 1/2))^2 + (log pi/pi_ref(y_l)
- eta (P_l - 1/2))^2 with eta = ``baselines.sppo_eta`` (official runs: beta = 1e-3 = 1/eta),
not DPO's beta (``sparta.train.sppo_loss``); ``baselines.sppo_loss: sppo_hard`` is TRL's.

Deliberate differences: the annotator is a language model judge (``baselines.annotator``, any
model folder; default the members' base model without adapter), not PairRM; every member
aligns alone; the win probabilities are stored as scores 1 + 9 P in ``judgments``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

from .base import Method, best_and_worst_pairs


class SPPO(Method):
    name = "sppo"
    default_samples = 5
    judgment_owner = "target"  # the annotator judges; the row belongs to the judged member's job

    def judgment_format(self, cfg) -> str:
        return "pairwise"

    def judge(self, run) -> None:
        from ..judging import JudgeItem, Judgment, judge_duels, reference_win_probability
        from ..members import MemberSpec

        a = run.baselines.annotator
        pairwise = replace(run.cfg, format="pairwise", mode="expected")
        asked = []  # (annotator, duel id, member, (i, j), item): every two answers of a prompt
        for spec in run.specs:
            annotator = MemberSpec("annotator", a.base if a else spec.base, a.adapter if a else None)
            for d in run.duels[run.duels["member_a"] == spec.name].itertuples(index=False):
                for i, j in itertools.combinations(run.samples_of(d.duel_id, spec.name), 2):
                    items = [JudgeItem(d.prompt, run.text[(d.duel_id, spec.name, x)]) for x in (i, j)]
                    asked += [
                        (annotator, d.duel_id, spec.name, (i, j), items[0]),
                        (annotator, d.duel_id, spec.name, (i, j), items[1]),
                    ]
        judged = run.judged(asked, judge_duels, pairwise, lambda i: run.seed("annotator", *asked[i][1:4]))
        if run.reference:  # P(first beats second) from the two answers' reference scores, as 1 + 9 P
            for k in range(0, len(asked), 2):
                p = reference_win_probability(judged[k].score, judged[k + 1].score)
                judged[k] = replace(judged[k], score=1 + 9 * p, error=None)
        beats, tokens, requests = {}, {}, {}
        for k in range(0, len(asked), 2):
            _, duel, member, (i, j), _ = asked[k]
            score = judged[k].score
            beats.setdefault((member, duel), {})[(i, j)] = 0.5 if score is None else (score - 1) / 9
            tokens[(member, duel)] = tokens.get((member, duel), 0) + judged[k].tokens + judged[k + 1].tokens
            # a comparison asked in both orders: 2 requests (none for the reference judge)
            requests[(member, duel)] = (
                requests.get((member, duel), 0) + judged[k].requests + judged[k + 1].requests
            )
        for (member, duel), p in beats.items():
            samples = sorted({x for pair in p for x in pair})
            # the prompt's tokens and requests shared over its K answers, summing to the totals
            tok, req = (share(total[(member, duel)], len(samples)) for total in (tokens, requests))
            for q, (k, w) in enumerate(win_rates(p, samples).items()):
                raw = json.dumps({"win_rate": w, "p_beats": {f"{i}>{j}": v for (i, j), v in p.items()}})
                run.add(
                    "annotator",
                    duel,
                    member,
                    k,
                    Judgment(
                        1 + 9 * w,
                        raw,
                        None,
                        False,
                        False,
                        tok[q],
                        req[q],  # K (K - 1) requests over K answers
                    ),
                )

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        """The answers with the highest and the lowest win probability (scores 1 + 9 P)."""
        return best_and_worst_pairs(duels, responses, judgments)

    def loss(self, baselines) -> str:
        return baselines.sppo_loss


def share(total: int, k: int) -> list[int]:
    """``total`` split into ``k`` whole parts that differ by at most one and sum to it."""
    base, extra = divmod(total, k)
    return [base + (q < extra) for q in range(k)]


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
