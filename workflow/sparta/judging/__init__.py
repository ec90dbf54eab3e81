"""Cross-judging: the judge prompts, the defences against answers that address the judge,
the parse cascades and the expected-score mode.

Two formats: ``pointwise`` (the paper, the authors) scores each answer of a duel alone, 1-10;
``pairwise`` asks which answer is better in both orders (position bias cancels), and P(a better)
becomes the scores 1 + 9 P and 10 - 9 P, in the units of the pointwise gap. Two modes:
``generate`` samples the judge's text and parses it (JSON first, then a cascade of patterns);
``expected`` forces the start of the answer (:data:`LABEL_PREFIX` with secret labels, else the
rubric's prefix or :data:`PAIRWISE_PREFIX`) and reads the exact probability of every candidate
continuation. The defences are switches recorded on every judgment (:mod:`~sparta.judging.defence`);
docs/guides/judging.md describes each format, mode and defence, with the measurements.

Pure: a judge is a served member (:class:`sparta.backends.Served`); only its tokenizer and
its two primitives are used here.

One concern per module (docs/development/architecture.md lists them), each importing only
those listed there before it; every name is re-exported here, so callers import from
:mod:`sparta.judging`.
"""

from .attacks import FAMILIES, attack_families
from .defence import (
    LABELS,
    MARK,
    REMOVED,
    altered,
    datamark,
    defences,
    fence,
    present,
    sanitize,
    shown_content,
    suspicious,
    verdict_labels,
)
from .judge import (
    expectation,
    expected_scores,
    judge_answers,
    judge_duels,
    meta_judge,
    reference_judgment,
    reference_win_probability,
)
from .parse import parse_score, parse_winner
from .prompts import (
    ADDITIVE_PROMPT,
    ADDITIVE_RUBRIC,
    ASSISTANT_PREFIX,
    DATAMARK_NOTE,
    JUDGE_PROMPT,
    LABEL_PREFIX,
    LABELLED_OUTPUT,
    META_PROMPT,
    PAIRWISE_PREFIX,
    PAIRWISE_PROMPT,
    PAIRWISE_TEMPLATE,
    RUBRICS,
    SCORES,
    SPARTA_RUBRIC,
    TRUNCATION_MARK,
    JudgeItem,
    Judgment,
    Rubric,
    candidate_ids,
    judge_ids,
    strip_score,
)

__all__ = [
    "ADDITIVE_PROMPT",
    "ADDITIVE_RUBRIC",
    "ASSISTANT_PREFIX",
    "DATAMARK_NOTE",
    "FAMILIES",
    "JUDGE_PROMPT",
    "LABELLED_OUTPUT",
    "LABELS",
    "LABEL_PREFIX",
    "MARK",
    "META_PROMPT",
    "PAIRWISE_PREFIX",
    "PAIRWISE_PROMPT",
    "PAIRWISE_TEMPLATE",
    "REMOVED",
    "RUBRICS",
    "SCORES",
    "SPARTA_RUBRIC",
    "TRUNCATION_MARK",
    "JudgeItem",
    "Judgment",
    "Rubric",
    "altered",
    "attack_families",
    "candidate_ids",
    "datamark",
    "defences",
    "expectation",
    "expected_scores",
    "fence",
    "judge_answers",
    "judge_duels",
    "judge_ids",
    "meta_judge",
    "parse_score",
    "parse_winner",
    "present",
    "reference_judgment",
    "reference_win_probability",
    "sanitize",
    "shown_content",
    "strip_score",
    "suspicious",
    "verdict_labels",
]
