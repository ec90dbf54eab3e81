"""Self-rewarding (Yuan et al. 2024, "Self-Rewarding Language Models", arXiv 2401.10020; no
official code was released: this follows the paper's section 2-3 and figure 2).

Each member samples ``baselines.samples`` answers per prompt (paper: N = 4) and judges each
itself with the paper's additive 5-point LLM-as-a-judge prompt (``baselines.judge_prompt:
additive``); in generate mode it judges each answer ``baselines.judge_samples`` times (paper: 3)
and averages. Chosen = the highest scored answer, rejected = the lowest; pairs with equal
scores are dropped (paper), and so are pairs less than ``baselines.min_margin`` apart.
Meta-rewarding's length control (``baselines.length_control``) applies only when set. DPO
trains the member on its own pairs, against itself as it entered the iteration.

Deliberate differences: every member of the pool aligns alone (the paper aligns one model);
the paper's expected-mode counterpart does not exist: in expected mode the answer is forced to
start with "Score: " (no justification) and the expected points are read; the paper's 0-5
points are stored as 1 + 9 points / 5; the seed data (IFT/EFT SFT) of the paper is not used:
members start from the shared initial pool.
"""

from __future__ import annotations

from ..judging import RUBRICS, JudgeItem, judge_answers
from .base import Method, best_and_worst_pairs, mean_judgment


class SelfRewarding(Method):
    name = "self_rewarding"
    default_samples = 4
    tie_setting = "baselines.min_margin"
    default_length_control: float | tuple[float, ...] | None = None
    """rho (or a schedule of rho by iteration) of the pairs' length control when
    ``baselines.length_control`` is null (None: off)."""

    def judge(self, run) -> None:
        """Each member judges its own answers."""
        self.judge_own(run)

    def judge_own(self, run) -> tuple[list, list, int]:
        """Each member judges its own answers, ``n`` times each: adds one row per answer (the
        mean) and returns (asked, every sampled judgment in turn, n) for meta-rewarding."""
        asked = []  # (member, duel id, sample, item): every answer of the member to its prompts
        for spec in run.specs:
            for d in run.duels[run.duels["member_a"] == spec.name].itertuples(index=False):
                asked += [
                    (spec, d.duel_id, k, JudgeItem(d.prompt, run.text[(d.duel_id, spec.name, k)]))
                    for k in run.samples_of(d.duel_id, spec.name)
                ]
        # generate mode: each answer judged judge_samples times (the paper's 3), scores averaged
        n = run.baselines.judge_samples if run.cfg.mode == "generate" and not run.reference else 1
        rubric = RUBRICS[run.baselines.judge_prompt]
        each = [a for a in asked for _ in range(n)]
        judged_each = run.judged(
            each,
            judge_answers,
            run.cfg,
            lambda i: run.seed(each[i][0].name, *each[i][1:3], *([i % n] if i % n else [])),
            rubric,
        )
        judged = [mean_judgment(judged_each[i : i + n]) for i in range(0, len(each), n)]
        for (spec, duel, k, _), j in zip(asked, judged):
            run.add(spec.name, duel, spec.name, k, j)
        return asked, judged_each, n

    def length_control(self, baselines, iteration: int) -> float | None:
        """rho of the actor pairs of ``iteration`` (``baselines.length_control``, null: the
        method's default; None: off)."""
        rho = baselines.length_control
        return rho_at(self.default_length_control if rho is None else rho, iteration)

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        pairs = []
        for t, part in duels.groupby("iteration", sort=True):  # one iteration (a round) in practice
            rho = self.length_control(baselines, int(t))
            pairs += best_and_worst_pairs(part, responses, judgments, rho, baselines.min_margin)
        return pairs


def rho_at(rho: float | tuple[float, ...] | None, iteration: int) -> float | None:
    """Length control rho of ``iteration`` (1, 2, ...): a number is every iteration's; a
    schedule gives iteration t its t-th value and every iteration after its end its last one
    (NeMo-Aligner's ``length_control`` list refuses an iteration past its end)."""
    if rho is None or isinstance(rho, (int, float)):
        return rho
    return rho[min(max(iteration, 1), len(rho)) - 1]
