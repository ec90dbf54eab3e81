"""Settings of generation and judging: how an answer is sampled (:class:`Sampling`), combat's
sampling (:class:`GenerationSettings`) and the judges' (:class:`JudgeSettings`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ..fields import MAX_TOKENS, inherit, setting

NO_DEFENCE = {"source": "sparta", "authors": "(their code: none)"}
"""The constants table's source of a judging defence, which the authors' code does not have."""

Answer = Literal["number", "boxed"]
"""How an answer is read: a GSM8K-style number, or MATH's \\boxed{}."""


@dataclass(frozen=True)
class SamplingFields:
    """How one answer is decoded; temperature 0 is greedy. Defaults are the authors' (T 0.7,
    top_p 0.95, top_k 50). Declared once here for :class:`Sampling`, combat
    (:class:`GenerationSettings`) and judging (:class:`JudgeSettings`)."""

    temperature: float = setting(
        0.7,
        ge=0,
        le=10,
        help="Sampling temperature (0: greedy).",
        constant="sampling temperature",
        source="authors' code",
    )
    top_p: float = setting(
        0.95,
        gt=0,
        le=1,
        help="Nucleus sampling threshold.",
        constant="sampling top_p",
        source="authors' code",
    )
    top_k: int = setting(
        50, ge=0, help="Top-k sampling (0: off).", constant="sampling top_k", source="authors' code"
    )
    max_new_tokens: int = setting(
        512,
        ge=1,
        le=MAX_TOKENS,
        help="Longest answer (also under each base model's context, checked before any job).",
        constant="combat max new tokens",
        source="authors' code",
    )


@dataclass(frozen=True)
class Sampling(SamplingFields):
    """How one answer is decoded; temperature 0 is greedy."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @classmethod
    def greedy_decoding(cls, max_new_tokens: int) -> Sampling:
        return cls(temperature=0.0, max_new_tokens=max_new_tokens)


def _sampling(self: SamplingFields) -> Sampling:
    return Sampling(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SamplingFields)})


@dataclass(frozen=True)
class GenerationSettings(SamplingFields):
    """Combat sampling (authors' values)."""

    batch_size: int = setting(24, ge=1, help="Prompts per generate call.")

    sampling = property(_sampling)


@dataclass(frozen=True)
class _Judging:
    """The fields of :class:`JudgeSettings` before its sampling fields (their order is the
    order of a judge job's params)."""

    kind: Literal["peers", "reference"] = setting(
        "peers",
        help="peers: the members judge (the paper); reference: each answer is checked against its "
        "prompt's answer (prompts.answer_column, the exact_match extraction of judge.answer): right "
        "10, wrong 1, no model runs. The positive control: judges known to be right.",
    )
    answer: Answer = setting(
        "number", help="How the reference judge reads an answer, as the exact_match metric."
    )
    format: Literal["pointwise", "pairwise"] = setting(
        "pointwise",
        help="pointwise: each answer scored alone, 1-10 (paper); pairwise: both answers compared in "
        "both orders, P(a better) becomes the scores 1 + 9P and 10 - 9P (the same units for Eq. 1).",
        constant="judge format",
        source="paper",
    )
    mode: Literal["expected", "generate"] = setting(
        "expected",
        help="expected: exact probabilities of the candidate verdicts; generate: sample and parse (authors).",
        constant="judge mode",
        source="sparta",
        authors="(their code: generate)",
    )
    plain_text: bool = setting(
        True,
        help="Defence: special-token strings inside a judged answer or prompt are tokenized as plain "
        "text, never as control tokens. On by default: on 256 duels with a SmolLM2-135M judge it "
        "changed no judgment (label accuracy +0.0 [+0.0, +0.0]).",
        constant="judging defence: plain-text tokens",
        **NO_DEFENCE,
    )
    secret_labels: bool = setting(
        False,
        help="Defence (expected mode): the judge answers with secret labels drawn per judged set from "
        "a seeded random set (the score levels pointwise, the two answers pairwise), mapped back to "
        "the score, so an answer cannot name the token its judge is scored on. Off by default: on 256 "
        "duels with a SmolLM2-135M judge it changed label accuracy by -3.9 points [-12.5, +4.7], an "
        "interval reaching below -5 (docs: Results, judging).",
        constant="judging defence: secret verdict labels",
        **NO_DEFENCE,
    )
    datamark: bool = setting(
        False,
        help="Defence: spotlighting by datamarking (Hines et al. 2024); the answer is shown with a "
        "marker in place of its whitespace, and the judge is told marked text is data, never "
        "instructions. Off by default: on 256 duels with a SmolLM2-135M judge it changed label "
        "accuracy by -0.8 points [-6.2, +4.7], an interval reaching below -5 (docs: Results, judging).",
        constant="judging defence: datamarking",
        **NO_DEFENCE,
    )
    sanitize: bool = setting(
        False,
        help="The word-list monitor also alters what the judge reads: score-like text and notes "
        "addressed to the judge are replaced by [removed] (off: it only flags, the judgments' "
        "sanitized column; the stored answer is never changed).",
        constant="judging monitor: word-list sanitiser (flags only)",
        **NO_DEFENCE,
    )
    fence: bool = setting(
        True,
        help="Defence: the answer is shown inside a fence it cannot close, its block markers made inert. "
        "On by default: on 256 duels with a SmolLM2-135M judge it changed label accuracy by -1.2 "
        "points [-3.5, +1.2], within 5 points either way.",
        constant="judging defence: fence",
        **NO_DEFENCE,
    )
    max_length: int = setting(
        1024,
        ge=64,
        le=MAX_TOKENS,
        help="Token budget of a judge prompt; only the judged response is ever shortened.",
    )
    batch_size: int = setting(8, ge=1, help="Judgments per forward pass (expected mode).")
    generate_batch_size: int = setting(
        48,
        ge=1,
        help="Judgments per generate call (generate mode, and meta-rewarding's sampled judgments "
        "with reasons). Each judgment samples from its own seed, so the batch never changes "
        "a judgment; decoding reads every weight once per step for all rows, so larger batches "
        "cost less per judgment (benchmarks/bench_judge_generate.py measures it). Lower it where a "
        "GPU runs out of memory: each row holds its own KV cache of prompt + max_new_tokens.",
        added="judge generate batch",
    )


@dataclass(frozen=True)
class JudgeSettings(SamplingFields, _Judging):
    """Cross-judging of both answers of every duel by the members not in it (its sampling:
    generate mode only)."""

    max_new_tokens: int = inherit(
        SamplingFields,
        "max_new_tokens",
        256,
        help="Longest judgment (generate mode only).",
        constant="judge max new tokens (generate)",
        source="authors' code",
    )

    sampling = property(_sampling)
