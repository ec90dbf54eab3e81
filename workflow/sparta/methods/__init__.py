"""The methods of a run, one module each: ``sparta`` (the tournament) and the four
self-alignment baselines of the paper's Table 1, ``self_rewarding``, ``meta_rewarding``,
``spin`` and ``sppo``. Each module's docstring cites its paper and the official code it
follows and lists its deliberate differences; ``base`` holds the interface the rule scripts
call (:class:`~sparta.methods.base.Method`) and what the baselines share.

A baseline aligns every member of the pool alone over the same stages and tables: its duels
table has one row per (member, prompt), the member against itself (``member_a = member_b``,
``opponent_branch`` "self"), and its pairs carry the member in ``trainee``.
"""

from __future__ import annotations

from .base import JudgeRun, Method, Round, best_and_worst, mean_judgment, self_duels
from .meta_rewarding import MetaRewarding, meta_judge_pairs
from .self_rewarding import SelfRewarding
from .sparta import Sparta
from .spin import SPIN
from .sppo import SPPO, win_rates

REGISTRY: dict[str, Method] = {
    m.name: m for m in (Sparta(), SelfRewarding(), MetaRewarding(), SPIN(), SPPO())
}
METHODS = tuple(REGISTRY)

__all__ = [
    "METHODS",
    "REGISTRY",
    "JudgeRun",
    "Method",
    "Round",
    "best_and_worst",
    "get",
    "mean_judgment",
    "meta_judge_pairs",
    "samples_per_prompt",
    "self_duels",
    "win_rates",
]


def get(name: str) -> Method:
    """The method object of ``method: name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; methods: {METHODS}") from None


def samples_per_prompt(method: str, samples: int | None) -> int:
    """Answers a member gives each prompt: two combatants answer once in Sparta; a baseline
    member answers ``samples`` times (None: the method's default, SPPO 5), SPIN once."""
    return get(method).samples(samples)


def problems(settings, root, notes: list[str]) -> list[str]:
    """What the method needs that the config may lack, and reputation settings that cannot move
    (a method with reputations) or that it would not use; what its judge settings make
    impossible (meta-rewarding's judge pairs under greedy or single judgments) goes to ``notes``."""
    from ..reputation import problems as reputation_problems

    method = get(settings.method)
    notes.extend(method.judging_warnings(settings.judge, settings.baselines))
    if not method.baseline:
        return _needs(settings, root, notes) + reputation_problems(settings.reputation)
    if settings.reputation.labels == "random":
        return [
            f"reputation.labels: random swaps the pairs of Sparta's aggregation; method {method.name} "
            "makes its own pairs and would train on judged labels: use method: sparta for the null arm",
            *_needs(settings, root, notes),
        ]
    return _needs(settings, root, notes)


def tie_rule_notes(runs) -> list[str]:
    """A study whose methods decide ties by different settings' values (Sparta's
    ``reputation.min_gap``, the self-judging baselines' ``baselines.min_margin``): its comparison
    also compares two tie rules."""
    rules = {}
    for settings in runs:
        name = get(settings.method).tie_setting
        if name:
            section, key = name.split(".")
            rules.setdefault(name, set()).add(getattr(getattr(settings, section), key))
    if len(rules) < 2 or len({v for values in rules.values() for v in values}) < 2:
        return []
    told = ", ".join(f"{k}: {', '.join(map(str, sorted(v)))}" for k, v in sorted(rules.items()))
    return [
        f"the methods compared drop near-equal pairs by different margins ({told}): set them equal "
        "(e.g. reputation.min_gap to baselines.min_margin) to compare the methods under one tie rule"
    ]


def _needs(settings, root, notes: list[str]) -> list[str]:
    from ..pool import judge_model_problems

    m = settings.method
    if settings.judge.kind == "reference":
        if m in ("spin", "meta_rewarding"):
            why = (
                "SPIN does not judge"
                if m == "spin"
                else "its meta-judge judges judgments, which have no answer"
            )
            return [
                f"judge.kind: reference with method {m}: {why}; use it with sparta, self_rewarding or sppo"
            ]
        if not settings.prompts.answer_column:
            return [
                "judge.kind: reference checks answers against the prompts' answers: set prompts.answer_column"
            ]
    if m == "spin" and not settings.prompts.reference_column:
        return ["method spin needs a reference answer per prompt: set prompts.reference_column"]
    if m in ("self_rewarding", "meta_rewarding") and settings.judge.format != "pointwise":
        return [f"method {m}: a member scores each of its own answers alone: set judge.format: pointwise"]
    if m == "sppo" and settings.baselines.annotator is not None:
        annotator = settings.baselines.annotator
        return judge_model_problems(root, annotator, "baselines.annotator", notes, settings.backend)
    return []
