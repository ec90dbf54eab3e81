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

from dataclasses import replace

import pandas as pd

from .base import JudgeRun, Method, best_and_worst, mean_judgment, self_duels
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
    "baseline_pairs",
    "best_and_worst",
    "get",
    "mean_judgment",
    "meta_judge_pairs",
    "samples_per_prompt",
    "self_duels",
    "trained_iterations",
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


def trained_iterations(method: str, t: int, spin_history: int = 1) -> list[int]:
    """The iterations whose pairs the members train on at the end of iteration ``t``: ``t``
    alone, or for SPIN the last ``spin_history`` iterations up to ``t``."""
    from ..settings import BaselineSettings

    return get(method).trained_iterations(t, BaselineSettings(spin_history=spin_history))


def baseline_pairs(
    method: str,
    duels,
    responses,
    judgments,
    length_control: float | tuple[float, ...] | None = None,
    min_margin: float = 0.0,
    **others,
) -> pd.DataFrame:
    """A baseline's pairs of a round with these settings (``others``: more of
    :class:`~sparta.settings.BaselineSettings` by name; the rest at their defaults)."""
    from ..settings import BaselineSettings

    m = get(method)
    if not m.baseline:
        baselines = tuple(name for name, b in REGISTRY.items() if b.baseline)
        raise ValueError(f"{method} is not a baseline; baselines: {baselines}")
    settings = replace(BaselineSettings(), length_control=length_control, min_margin=min_margin, **others)
    return m.pairs(duels, responses, judgments, settings)
