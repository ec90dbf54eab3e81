"""Meta-rewarding (Wu et al. 2024, "Meta-Rewarding Language Models: Self-Improving Alignment
with LLM-as-a-Meta-Judge", arXiv 2407.19594; no official training code was released: this
follows the paper's section 2).

Self-rewarding's actor pairs (``self_rewarding``), plus judge pairs: the member judges its
chosen answer again ``baselines.meta_judgments`` times in words (generate mode); then, as
meta-judge, it compares two of those judgments (the exact probability of "A" vs "B" after a
forced prefix, in both orders); the preferred judgment is chosen, the other rejected, with
the judge instruction as the prompt (``kind: judge``). Actor and judge pairs train together.
``baselines.length_control`` (rho) is the paper's length control of the actor pairs.

Deliberate differences from the paper (issue 22 lists them as work to do): the re-judged
answer is the best-scored one, not the one whose judgments vary most; the meta-judge sees the
judgments with their scores and compares one pair of them, not all pairs of N >= 3 judgments
ranked by an Elo fit; length control is off by default; every member aligns alone.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from .base import duel_row, pair
from .self_rewarding import SelfRewarding


class MetaRewarding(SelfRewarding):
    name = "meta_rewarding"
    default_samples = 4

    def judge(self, run) -> tuple[list, list]:
        from ..jobs import by_base
        from ..judging import RUBRICS, JudgeItem, Judgment, judge_answers, judge_ids, meta_judge

        asked, judged = super().judge(run)
        # the member judges its best answer again, n times, in words; then, as meta-judge, says
        # which of two of its judgments is better: that pair teaches it to judge
        frame = pd.DataFrame(
            [(a[0].name, a[1], a[2], j.score) for a, j in zip(asked, judged)],
            columns=["member", "duel", "sample", "score"],
        ).dropna()
        best = frame.sort_values(["score", "sample"], ascending=[False, True]).drop_duplicates(
            ["member", "duel"]
        )
        by = {s.name: s for s in run.specs}
        prompt_of = dict(zip(run.duels["duel_id"], run.duels["prompt"]))
        n = run.baselines.meta_judgments
        sampled = replace(run.cfg, mode="generate")
        rubric = RUBRICS[run.baselines.judge_prompt]
        again = [
            (
                by[b.member],
                b.duel,
                int(b.sample),
                JudgeItem(prompt_of[b.duel], run.text[(b.duel, b.member, int(b.sample))]),
            )
            for b in best.itertuples(index=False)
            for _ in range(n)
        ]
        texts = run.run(
            again,
            lambda served, group: judge_answers(
                served,
                [again[i][3] for i in group],
                sampled,
                run.system,
                [run.seed(again[i][0].name, again[i][1], again[i][2], "meta", i % n) for i in group],
                rubric,
            ),
        )
        firsts = list(range(0, len(again), n))
        users = [
            judge_ids(
                run.backend.serve(again[i][0]).tok,
                again[i][3].prompt,
                [again[i][3].response],
                sampled,
                run.system,
                "",
                rubric,
            )[0]
            for i in firsts
        ]
        pairs = [(texts[i].raw, texts[i + 1].raw) for i in firsts]
        verdicts = [None] * len(firsts)
        for group in by_base([again[i][0] for i in firsts]):
            served = run.backend.serve_each([again[firsts[g]][0] for g in group for _ in (0, 1)])
            for g, p in zip(
                group,
                meta_judge(served, [users[g] for g in group], [pairs[g] for g in group], run.cfg, run.system),
            ):
                verdicts[g] = p
        for g, i in enumerate(firsts):
            spec, duel, k, _ = again[i]
            p = verdicts[g]
            raw = json.dumps({"user": users[g], "judgments": list(pairs[g]), "p_first": p})
            meta = Judgment(
                None if p is None else 1 + 9 * p,
                raw,
                None if p is not None else "no verdict",
                texts[i].truncated,
                False,
                texts[i].tokens + texts[i + 1].tokens,
            )
            run.add(spec.name, duel, spec.name, k, meta, "meta")
        return asked, judged

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        return super().pair_rows(duels, responses, judgments, baselines) + meta_judge_pairs(duels, judgments)


def meta_judge_pairs(duels, judgments) -> list[dict]:
    """Judge pairs of meta-rewarding: for each meta-judgment (kind "meta", raw: the judge's
    user message, its two judgments, P(first better)), the preferred judgment is chosen."""
    pairs = []
    for j in judgments[judgments["kind"] == "meta"].itertuples(index=False):
        meta = json.loads(j.raw)
        p, (first, second) = meta.get("p_first"), meta["judgments"]
        if p is None or p == 0.5 or first == second:
            continue
        chosen, rejected = (first, second) if p > 0.5 else (second, first)
        row = duel_row(duels, j.duel_id)
        pairs.append(
            pair(
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
