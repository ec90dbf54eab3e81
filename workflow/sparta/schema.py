"""The config schema and the constants page, generated from the settings dataclasses.

Every setting is declared once, as a field of :class:`sparta.settings.Settings` (and of the
dataclasses it holds) with :func:`sparta.fields.setting`; this module makes what follows from
those declarations, and :mod:`sparta.docgen` writes it with every other generated page. No
schema ``default`` keyword: Snakemake's ``validate`` would fill it into the config, a second
source of defaults that would also override a reputation preset's. What no field declares is
written here, once: the ``study`` section and ``reputation.preset``.

Pure: no model, no heavy import.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from pathlib import Path
from typing import Any, Literal

from .fields import BOUNDS, MISSING, choices, unwrap
from .reputation import PRESETS
from .settings import NAME, Settings

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "workflow" / "schemas" / "config.schema.yaml"
CONSTANTS_PAGE = REPO / "docs" / "reference" / "constants.md"
DEFAULT_CONFIG = REPO / "config.yaml"
COMMAND = "python -m sparta.docgen --write"
CHOICES_SHOWN = 3  # the table names the choices of a key with at most this many

HEADER = f"""\
# GENERATED from the settings dataclasses (workflow/sparta/settings.py, matchmaking.py,
# reputation.py): do not edit. Change a field there and run:
#   {COMMAND}
"""

DESCRIPTION = (
    "Configuration of one Sparta experiment: the keys, their types and bounds. Every setting is "
    "declared once, a field of the dataclasses of workflow/sparta/settings.py (the authors' code's "
    "values unless a description says otherwise); `sparta config [--configfile FILE]` prints every "
    "setting of a config with the defaults filled in. docs/reference/config.md lists every key, "
    "docs/reference/constants.md every Sparta constant and its source."
)


def _overlays(description: str) -> dict:
    """A study axis: named overlays of the config."""
    return {
        "type": "object",
        "propertyNames": {"pattern": NAME},
        "additionalProperties": {"type": ["object", "null"]},
        "description": description,
    }


STUDY = {
    "type": "object",
    "additionalProperties": False,
    "description": (
        "Several experiments in one DAG: each is this config with an overlay merged in, run once per "
        "seed under results/<experiment>/<name>-seed<s>/; the prompt splits, the initial pool and its "
        "evaluation are built once per seed and shared. Without it the config is one experiment."
    ),
    "properties": {
        "seeds": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "integer", "minimum": 0},
            "description": "Seeds every experiment runs with (default [seed]).",
        },
        "experiments": _overlays(
            "name: overlay (any keys of this config, e.g. {method: spin} or {reputation: {updates: false}})."
        ),
        "tasks": _overlays(
            "Tasks as a study axis, as the paper aligns once per task: name: overlay (its prompts, "
            "the alignment prompts X, and its evaluation.tasks). Every experiment runs once per "
            "task and seed under results/<experiment>/<task>/<name>-seed<s>/; the initial pool is "
            "shared by every task of a seed, the prompt splits and the pool's evaluation per task."
        ),
        "experiment_tasks": {
            "type": "object",
            "propertyNames": {"pattern": NAME},
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "description": (
                "experiment: [task, ...]: the tasks of study.tasks an experiment runs on (default: "
                "every task), as the paper ran its ablations and pool sizes on four of its tasks."
            ),
        },
    },
}
"""The study section: read by sparta.study, not a setting of one run (an overlay is free-form)."""

PRESET = {
    "type": "string",
    "enum": list(PRESETS),
    "description": (
        "sparta (default): the authors' constants, the paper's algorithm where it is explicit; "
        "authors: their code throughout (down-weighting of combatants from iteration 3, at most six, "
        "a fresh window each iteration, sequential update); paper: its text (kappa 1, no divisor, "
        "ddof 1). Any other key of reputation overrides the preset."
    ),
}
"""reputation.preset: chooses the defaults of the other reputation keys (sparta.reputation.PRESETS)."""

NOTE_ROWS = [
    (
        "a judge with one unusable score",
        "left out of both sides of that duel",
        "sparta",
        "(their code: 5 for both answers)",
        "",
        "",
    ),
]
"""Rows of the constants table that are no setting: behaviour fixed in the code."""


# --- the schema --------------------------------------------------------------------------------


def _text(doc: str) -> str:
    """Help text on one line, without reStructuredText markup."""
    return " ".join(doc.replace("``", "").replace(":class:", "").split())


def value_text(value: Any) -> str:
    """A default as a config file writes it (null, true, 1e-6)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        plain = f"{value:g}"
        short = re.sub(r"e([+-])0*(\d)", lambda m: f"e{m[1].replace('+', '')}{m[2]}", f"{value:.0e}")
        return short if float(short) == value and len(short) < len(plain) else plain
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(value_text, value)) + "]"
    return str(value)


def _cell(value: Any) -> str:
    """A default in the table: text with spaces quoted."""
    return f'"{value}"' if isinstance(value, str) and " " in value else value_text(value)


def _scalar(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_scalar(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _optional(hint: Any) -> tuple[Any, bool]:
    """The hint without None, and whether None was allowed."""
    only = unwrap(hint)
    return only, only is not hint


def _json_type(kind: type) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string"}[kind]


def type_schema(hint: Any, default: Any = MISSING) -> dict:
    """The schema of a type hint (``default``: the value of a dataclass, for its fields')."""
    if hint is Any:
        return {}  # any value (the values of a free-form mapping)
    hint, nullable = _optional(hint)
    origin = typing.get_origin(hint)
    if origin is Literal:
        values = list(typing.get_args(hint))
        (kind,) = {type(v) for v in values}
        out = {"type": _json_type(kind), "enum": values}
    elif dataclasses.is_dataclass(hint):
        out = object_schema(hint, None if default in (MISSING, None) else default)
    elif origin is tuple:
        (inner, *_) = typing.get_args(hint)
        out = {"type": "array", "items": type_schema(inner)}
    elif origin is dict:
        _, inner = typing.get_args(hint)
        out = {"type": "object", "additionalProperties": type_schema(inner)}
    else:
        out = {"type": _json_type(hint)}
    if nullable:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def field_schema(f: dataclasses.Field, hint: Any, default: Any) -> dict:
    """The schema of one setting: type, bounds, extra keywords, then its help and default."""
    out = type_schema(hint, default)
    for key, bound in f.metadata.get("bounds", {}).items():
        out[BOUNDS[key]] = bound
    out.update(f.metadata.get("schema", {}))
    text = _text(f.metadata["help"])
    if default is not MISSING and _scalar(default):
        text += f" Default: {value_text(default)}."
    nested = {k: out.pop(k) for k in ("required", "properties", "items") if k in out}
    return {**out, "description": text, **nested}


def _default(f: dataclasses.Field, instance: Any) -> Any:
    if instance is not None:
        return getattr(instance, f.name)
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def object_schema(cls: type, instance: Any = None) -> dict:
    """A dataclass as an object without unknown keys; ``instance`` gives the defaults shown
    (a parent's default may differ from the class's: resources.convert)."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    props = {f.name: field_schema(f, hints[f.name], _default(f, instance)) for f in fields}
    required = [f.name for f in fields if _default(f, None) is MISSING]
    out: dict = {"type": "object", "additionalProperties": False}
    if required:
        out["required"] = required
    out["properties"] = props
    return out


def schema() -> dict:
    """The config schema."""
    root = object_schema(Settings)
    props = root["properties"]
    props["reputation"]["properties"] = {"preset": PRESET, **props["reputation"]["properties"]}
    at = list(props).index("method") + 1
    props = {**dict(list(props.items())[:at]), "study": STUDY, **dict(list(props.items())[at:])}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": DESCRIPTION,
        "type": "object",
        "additionalProperties": False,
        "properties": props,
        "required": root["required"],
    }


def schema_text() -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Short lists of scalars on one line ([string, 'null'])."""

    def flow(dumper, data):
        short = all(v is None or isinstance(v, (str, int, float)) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=short)

    Dumper.add_representer(list, flow)
    return HEADER + yaml.dump(schema(), Dumper=Dumper, sort_keys=False, width=100, allow_unicode=True)


# --- the constants page -----------------------------------------------------------------------


def _settings(cls: type, prefix: str = "", instance: Any = None):
    """(config key, field, hint, default) of every setting, nested sections walked through."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = _default(f, instance)
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            yield from _settings(hint, f"{key}.", None if default is MISSING else default)
        else:
            yield key, f, hint, default


@functools.cache
def defaults() -> dict[str, Any]:
    """Every setting's default by dotted key (MISSING: a required key); not to be changed."""
    return {key: default for key, _, _, default in _settings(Settings)}


def _lookup(config: dict, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def table_rows(embedded: dict) -> list[tuple[str, ...]]:
    """One row per constant (settings declared with ``constant=``); settings of one constant
    with the same value (generation.top_p, judge.top_p) share a row."""
    rows: dict[tuple, list[str]] = {}
    for key, f, hint, default in _settings(Settings):
        table = f.metadata.get("table", {})
        if "constant" not in table:
            continue
        shown = table.get("shown", _cell(default))
        written = _lookup(embedded, key)
        if written is not MISSING and written != default:
            shown += f" (config.yaml: {value_text(written)})"
        own = key.removeprefix("reputation.") if key.startswith("reputation.") else None
        presets = [
            table.get(n, value_text(PRESETS[n][own]) if own in PRESETS[n] else "")
            for n in ("authors", "paper")
        ]
        allowed = choices(hint)
        few = allowed and len(allowed) <= CHOICES_SHOWN
        options = f" ({', '.join(f'`{value_text(c)}`' for c in allowed)})" if few else ""
        row = (table["constant"], shown, table["source"], *presets)
        rows.setdefault(row, []).append(f"`{key}`{options}")
    return [(*row, ", ".join(keys)) for row, keys in rows.items()] + NOTE_ROWS


def table_text(embedded: dict) -> str:
    head = ("constant", "`sparta` (default)", "source", "`authors` preset", "`paper` preset", "config key")
    lines = [
        "|" + "|".join(f" {cell} " if cell else " " for cell in row) + "|"
        for row in [head, *table_rows(embedded)]
    ]
    lines.insert(1, "|" + "---|" * len(head))
    return "\n".join(lines)


CONSTANTS_INTRO = """\
The paper gives the form of Eq. (1) but leaves most of its constants out; the authors' code
fills them in. Every constant is a config key. Three presets (`reputation.preset`) choose the
defaults of the reputation keys; a key set in a config overrides its preset:

- `sparta` (default): the authors' code's constants where the paper gives no value, the
  paper's algorithm where it is explicit (down-weighting of *judges* from iteration 2, both
  combatants updated from their pre-duel values, the same prompts every iteration).
- `authors`: the authors' code (`src1/`, its static down-weighting mode) throughout.
- `paper`: the paper's text for Eq. (1) (kappa 1, no divisor, std with N - 1).

*Source* says where the default comes from; the preset columns give a preset's value where it
differs from the default (for a setting outside `reputation`, what the authors' code does). A
value that the shipped `config.yaml` (the embedded CPU default) sets otherwise is shown in
brackets. [Config keys](config.md) has every key with its bounds and help;
[Sparta](../methods/sparta.md) the deliberate differences from the paper and the authors' code.
"""


def constants_text(embedded: dict) -> str:
    """docs/reference/constants.md: the constants table with its introduction."""
    note = "<!-- generated by " + COMMAND + " from the settings dataclasses: do not edit -->"
    return f"# Sparta constants\n\n{note}\n\n{CONSTANTS_INTRO}\n{table_text(embedded)}\n"


# --- the command -------------------------------------------------------------------------------


def outputs() -> dict[Path, str]:
    """The files this module generates and their text (:func:`sparta.docgen.outputs`: every
    generated file)."""
    import yaml

    embedded = yaml.safe_load(DEFAULT_CONFIG.read_text())
    return {SCHEMA_FILE: schema_text(), CONSTANTS_PAGE: constants_text(embedded)}
