"""Evaluation tasks: loading and checking, without any model (see evaluate.py for scoring).

A task is a local file (jsonl, json, csv, parquet) with a column mapping, or the experiment's
own validation/test prompts (``source: prompts``). A file task is split evenly, with the
seed, into validation and test, as the paper built its splits (appendix C.2).
"""

from __future__ import annotations

import ast
import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .data import PromptFileError, read_prompt_file, read_table_file, rows_where
from .fields import choices
from .settings import TaskSpec

METRICS: tuple[str, ...] = choices(typing.get_type_hints(TaskSpec)["metric"])
"""The metrics a task may name: the setting's choices, one scorer each in
:data:`sparta.evaluate.SCORERS` (``tests/test_schema.py`` holds the two equal)."""


class TaskError(ValueError):
    pass


@dataclass(frozen=True)
class Task:
    """A loaded task: its rows per split, and each example's options and labels parsed once
    (a split is in ``options``/``labels`` when the task has that column)."""

    name: str
    metric: str
    rows: dict[str, pd.DataFrame]  # split -> columns example_id, prompt, answer, reference
    answer: str = "number"
    chat_template: bool = True
    max_new_tokens: int = 256
    options: dict[str, list[list]] = field(default_factory=dict)  # split -> options per example
    labels: dict[str, list[list[int]]] = field(default_factory=dict)  # split -> 0/1 per option


def parse_list(value) -> list:
    """A list cell: a list or array as it is, or its JSON (or Python literal) text; a mapping of
    option letters to texts (MedQA's ``{"A": ..., "B": ...}``) as its values in letter order."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = ast.literal_eval(value)
    if isinstance(value, dict):
        return [value[k] for k in sorted(value) if value[k] is not None]
    return list(value)


def column_values(raw: pd.DataFrame, column: str, where: str) -> list:
    """The values of ``column`` of a task file; ``a.b`` reads field ``b`` of the mapping in
    column ``a`` (TruthfulQA's ``mc1_targets.choices``)."""
    if column in raw.columns:
        return raw[column].to_list()
    head, _, rest = column.partition(".")
    if not rest or head not in raw.columns:
        raise TaskError(f"{where}: no column {column!r}; columns are {list(raw.columns)}")
    values = []
    for cell in raw[head]:
        for key in rest.split("."):
            if isinstance(cell, str):
                cell = json.loads(cell)
            if not isinstance(cell, dict) or key not in cell:
                raise TaskError(f"{where}: column {head!r} has no field {rest!r} in every row")
            cell = cell[key]
        values.append(cell)
    return values


def _parsed(task: str, column: str, values, convert=lambda x: x) -> list[list]:
    try:
        return [[convert(x) for x in parse_list(v)] for v in values]
    except (ValueError, TypeError, SyntaxError) as e:
        raise TaskError(f"task {task}: a value of {column} is not a list: {e}") from e


def load_task(
    spec: TaskSpec, prompt_splits: dict[str, pd.DataFrame], seed: int, root: str | Path = "."
) -> Task:
    """A task from its config entry; a file task's path is relative to ``root``."""
    if spec.metric not in METRICS:
        raise TaskError(f"task {spec.name}: unknown metric {spec.metric!r}; use one of {METRICS}")
    if spec.source == "prompts":
        rows = {
            s: prompt_splits[s].rename(columns={"prompt_id": "example_id"}) for s in ("validation", "test")
        }
    else:
        path = Path(root) / spec.source_file()
        where = f"evaluation task {spec.name}"
        key = "evaluation.tasks[].dataset" if spec.dataset else "evaluation.tasks[].file"
        try:
            raw = read_table_file(path, f"{where}: file", key)
            if spec.where:
                raw = raw.loc[rows_where(raw, spec.where, f"{where}: where")].reset_index(drop=True)
            columns = (spec.prompt_column, spec.answer_column, spec.id_column)
            base = read_prompt_file(
                path, *columns, where=spec.where, template=spec.prompt_template, answer_map=spec.answer_map
            )
        except PromptFileError as e:
            raise TaskError(f"{where}: {e}") from e
        for key in ("options_column", "labels_column", "reference_column"):
            col = getattr(spec, key)
            if col:
                base[key.removesuffix("_column")] = column_values(raw, col, f"{where}: {key} in {path}")
        base = base.rename(columns={"prompt_id": "example_id"})
        shuffled = base.sample(frac=1.0, random_state=seed).reset_index(drop=True)
        half = len(shuffled) // 2
        rows = {"validation": shuffled.iloc[:half], "test": shuffled.iloc[half:]}
    if spec.max_examples:
        rows = {s: df.head(int(spec.max_examples)).reset_index(drop=True) for s, df in rows.items()}
    for s, df in rows.items():
        if len(df) == 0:
            raise TaskError(f"task {spec.name}: the {s} split is empty")
        if spec.metric in ("exact_match", "multiple_choice") and (
            "answer" not in df or df["answer"].isna().all()
        ):
            raise TaskError(_no_answers(spec, s))
    options = {s: _parsed(spec.name, "options", df["options"]) for s, df in rows.items() if "options" in df}
    labels = {s: _parsed(spec.name, "labels", df["labels"], int) for s, df in rows.items() if "labels" in df}
    rows = {s: df.drop(columns=["options", "labels"], errors="ignore") for s, df in rows.items()}
    for s, df in rows.items():
        _check_answers(spec, s, df, options.get(s))
    return Task(
        spec.name, spec.metric, rows, spec.answer, spec.chat_template, spec.max_new_tokens, options, labels
    )


def _no_answers(spec: TaskSpec, split: str) -> str:
    """Why a task that scores against answers has none: no answer column named, or one that
    holds no value (null in every row)."""
    needs = f"task {spec.name}: metric {spec.metric} scores against an answer"
    if spec.source == "prompts":
        return (
            f"{needs}, and the prompts' {split} split has none: prompts.answer_column names no "
            "column, or one that holds no value; name the prompt file's column with the answers"
        )
    if spec.answer_column is None:
        return f"{needs}: set answer_column to the column of {spec.source_file()} that holds them"
    return (
        f"{needs}: column {spec.answer_column!r} of {spec.source_file()} is there but holds no "
        f"value (null in every {split} row): fill it in, or set answer_column to the column with "
        "the answers"
    )


_LETTER = re.compile(r"^\(?([A-Za-z])\)?[.:]?$")


def _named(ids) -> str:
    ids = [str(i) for i in ids]
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _check_answers(spec: TaskSpec, split: str, df: pd.DataFrame, options: list | None) -> None:
    """Every row a metric scores against an answer has one, and a multiple-choice answer is
    the letter of one of its options (A-E without options): else the rows are named."""
    if spec.metric not in ("exact_match", "multiple_choice"):
        return
    answers = df["answer"]
    empty = answers.isna() | (answers.astype(str).str.strip() == "")
    if empty.any():
        raise TaskError(
            f"task {spec.name}: {int(empty.sum())} {split} rows have no answer (metric {spec.metric} "
            f"scores against it): {_named(df['example_id'][empty])}; fill them in or drop those rows"
        )
    if spec.metric == "multiple_choice":
        counts = [len(o) for o in options] if options is not None else [5] * len(df)
        bad = []
        for example, answer, n in zip(df["example_id"], answers, counts):
            m = _LETTER.match(str(answer).strip())
            if m is None or ord(m[1].upper()) - ord("A") >= n:
                bad.append(f"{example} ({answer!r})")
        if bad:
            raise TaskError(
                f"task {spec.name}: {len(bad)} {split} answers are not the letter of an option "
                f"(A, B, ...): {_named(bad)}; write the right option's letter"
            )
