"""Sparta (Jiang et al., "SPARTA ALIGNMENT: Collectively Aligning Multiple Language Models
through Combat"; official code github.com/yurujiang2003/sparta, ``src1/``).

Two members fight on a prompt (match-making, ``sparta.matchmaking``), each answers once; every
member not in the duel scores both answers pointwise 1-10 with the Sparta judge prompt; the
reputation-weighted score gap updates both reputations (Eq. (1), ``sparta.reputation``) and,
unless tied, makes a pair that every member trains on with DPO.

Deliberate differences from the official code (see ``sparta.reputation`` and the docs' Sparta
method page): the judge prompt is never truncated from the right
(only the judged answer is shortened), an unparsable judgment is left out rather than scored 5,
and the chat template ends chosen/rejected texts.
"""

from __future__ import annotations

from ..aggregation import aggregate_round
from ..judging import JudgeItem, judge_duels
from ..matchmaking import match_round
from ..reputation import begin_iteration
from .base import Method, Round


class Sparta(Method):
    name = "sparta"
    baseline = False
    unread = ("baselines",)  # rules/common.smk, baselines(): None in every Sparta job
    default_samples = 1
    judges_label_accuracy = True
    tie_setting = "reputation.min_gap"

    def samples(self, samples: int | None) -> int:
        return 1  # the two combatants answer once

    def rounds(self, settings) -> int:
        return settings.matchmaking.rounds_per_iteration

    def duels(self, plan, members, reputations, matchmaking, seed, *, t: int, r: int):
        return match_round(plan, members, reputations, matchmaking, seed, r)

    def judge(self, run) -> None:
        """Each served judge scores both answers of every duel it is not in."""
        asked = []  # (judge, duel id, target, item): both answers of a duel in turn
        duels = run.duels
        for spec in run.specs:
            for d in duels[(duels["member_a"] != spec.name) & (duels["member_b"] != spec.name)].itertuples(
                index=False
            ):
                for target in (d.member_a, d.member_b):
                    if (d.duel_id, target, 0) not in run.text:
                        raise ValueError(f"no response of {target} in duel {d.duel_id}: rerun its combat job")
                    asked.append(
                        (spec, d.duel_id, target, JudgeItem(d.prompt, run.text[(d.duel_id, target, 0)]))
                    )
        judged = run.judged(asked, judge_duels, run.cfg, lambda i: run.seed(asked[i][0].name, *asked[i][1:3]))
        for (spec, duel, target, _), j in zip(asked, judged):
            run.add(spec.name, duel, target, 0, j)

    def aggregate(self, state, round_: Round, reputation, baselines):
        begin_iteration(state, round_.iteration, reputation)
        state.round = round_.round
        return aggregate_round(state, round_.duels, round_.responses, round_.judgments, reputation)
