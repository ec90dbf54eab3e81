"""A finished run and new settings under its name: stopped before any job, unless asked.

A config that reuses the name of a finished run with other settings would have Snakemake
rebuild what they change ("Params have changed") and replace the finished files without a
word; :func:`check` (rules/common.smk, when the workflow is loaded) stops such a run instead,
dry runs too. Keys that change no output never stop a run (:data:`NO_OUTPUT`, and the
sections the method never reads, ``Method.unread``). A run stopped part way is resumed as
before: rerunning with a setting changed is how one fixes it.

Pure: reads settings.yaml and looks for files; no model, no heavy import.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import layout
from .fields import unwrap
from .methods import get as get_method
from .settings import Settings, SettingsError

SWITCH = "replace_finished"
"""The config key that lets a run replace a finished run of its name."""

NO_OUTPUT = ("experiment", SWITCH, "train", "resources", "from_embedded_default")
"""Top-level keys whose change rebuilds no output: never a reason to stop (experiment: the
folder's own name; from_embedded_default: a note record_settings adds)."""

FINAL_STATE = "final_state.parquet"
SHOWN = 12  # differences named per group of runs
RUNS_SHOWN = 5  # runs named per group
WIDTH = 60  # characters of a value shown

try:  # LibYAML's loader where installed: a study reads one settings.yaml per finished run
    _Loader: Any = yaml.CSafeLoader
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _Loader, _Dumper = yaml.SafeLoader, yaml.SafeDumper


def read_switch(config: dict) -> dict:
    """The config with :data:`SWITCH` read by its meaning, in place: Snakemake's ``--config``
    gives ``replace_finished=true`` as the text "true" (only True and False as booleans)."""
    value = config.get(SWITCH)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        config[SWITCH] = value.strip().lower() == "true"
    return config


def recorded(settings: Settings) -> dict:
    """What rule record_settings writes of a run: every setting but :data:`SWITCH` (a choice of
    one command, not of the run)."""
    return {k: v for k, v in settings.to_dict().items() if k != SWITCH}


@dataclass(frozen=True)
class Changed:
    """A finished run whose recorded settings differ from the current ones."""

    run: str  # the run id (its folder under results/)
    differences: tuple[tuple[str, Any, Any], ...]  # (dotted key, recorded, current)
    holds: str  # what the folder holds, in words
    files: int  # its files, logs and benchmarks aside
    replace: bool  # the run's replace_finished


class FinishedRunChanged(ValueError):
    """A run would rebuild a finished run of its name with other settings."""


def _roundtrip(data: dict) -> dict:
    """Plain YAML data, as settings.yaml holds it (lists for tuples, floats as floats)."""
    return yaml.load(yaml.dump(data, Dumper=_Dumper, sort_keys=False), Loader=_Loader) or {}


def _known(hint: Any, value: Any) -> Any:
    """``value`` without the keys the settings type ``hint`` no longer has (removed from sparta
    since the run was made: no current job reads them)."""
    hint = unwrap(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        hints = typing.get_type_hints(hint)
        return {k: _known(hints[k], v) for k, v in value.items() if k in hints}
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return [_known(typing.get_args(hint)[0], v) for v in value]
    if typing.get_origin(hint) is dict and isinstance(value, dict):
        return {k: _known(typing.get_args(hint)[1], v) for k, v in value.items()}
    return value


def _normal(data: dict) -> dict | None:
    """Recorded settings read back through :class:`Settings`: a key added to sparta since has
    its default, as in the current settings, and a key removed since is left out. None when
    they do not read back."""
    try:
        return _roundtrip(recorded(Settings.from_config(_known(Settings, data))))
    except (SettingsError, TypeError, ValueError, AttributeError, KeyError):
        return None


def _flat(value: Any, key: str = "") -> dict[str, Any]:
    """Dotted keys of nested settings: ``judge.max_length``, ``members[1].sft_domain``,
    ``base_models.tiny.path``; lists of plain values stay one value."""
    if isinstance(value, dict):
        items = [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    else:
        return {key: value}
    return {flat: v for k, item in items for flat, v in _flat(item, k).items()}


_ABSENT = object()
_TOP = re.compile(r"[.\[]")


def differences(old: dict, new: Settings) -> list[tuple[str, Any, Any]]:
    """The settings that differ between a run's recorded settings and ``new``, as (dotted key,
    recorded value, current value) in the current settings' order, keys of :data:`NO_OUTPUT`
    (and those the method never reads, ``Method.unread``) left out; a key one side lacks has
    the value absent."""
    current = _roundtrip(recorded(new))
    if old == current:
        return []
    normal = _normal(old)
    a, b = _flat(old if normal is None else normal), _flat(current)
    if normal is None:  # compared as written: only the keys both sides have
        a = {k: v for k, v in a.items() if k in b}
    ignored = set(NO_OUTPUT)
    if a.get("method") == new.method:
        ignored.update(get_method(new.method).unread)
    keys = list(dict.fromkeys([*b, *a]))
    return [
        (k, a.get(k, _ABSENT), b.get(k, _ABSENT))
        for k in keys
        if _TOP.split(k, 1)[0] not in ignored and a.get(k, _ABSENT) != b.get(k, _ABSENT)
    ]


def show(value: Any) -> str:
    """A setting's value in a line: YAML's words (null, true), JSON for the rest."""
    if value is _ABSENT:
        return "(not set)"
    if isinstance(value, str):
        text = value if value and value.strip() == value else json.dumps(value)
    else:
        text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def is_finished(folder: Path, old: dict) -> bool:
    """Whether a run folder holds a finished run of the recorded settings ``old``: its final
    state and the last checkpoint of every member."""
    run = layout.RunFolder(folder)
    t = old.get("iterations")
    members = [m.get("name") for m in old.get("members") or () if isinstance(m, dict)]
    if not isinstance(t, int) or not members or not run.at(layout.run_file, FINAL_STATE).is_file():
        return False
    return all(run.member_json(t, m).is_file() for m in members)


def contents(folder: Path, old: dict) -> tuple[str, int]:
    """What a finished run folder holds, in words, and its file count (logs, benchmarks and
    settings.yaml aside)."""
    aside = ("logs", "benchmarks")
    files = [
        p
        for p in folder.rglob("*")
        if p.is_file() and p.relative_to(folder).parts[0] not in aside and p.name != layout.SETTINGS
    ]
    run = layout.RunFolder(folder)
    members = [m.get("name") for m in old.get("members") or () if isinstance(m, dict)]
    iterations = range(1, int(old.get("iterations") or 0) + 1)
    checkpoints = [t for t in iterations if all(run.member_json(t, m).is_file() for m in members)]
    parts = []
    if checkpoints:
        first, last = (layout.iteration_name(t) for t in (checkpoints[0], checkpoints[-1]))
        span = first if first == last else f"{first}..{last}"
        parts.append(f"checkpoints {span} of {len(members)} members")
    for name in ("evaluation", "analysis", "report"):
        if any((folder / name).rglob("*.*")):
            parts.append(f"its {name}")
    return ", ".join(parts), len(files)


def changed_runs(runs: dict[str, Settings], root: str | Path = ".") -> list[Changed]:
    """The finished runs among ``runs`` (run id -> current settings) under the workflow's
    working directory ``root`` whose recorded settings differ in a key that changes outputs."""
    found = []
    for run, settings in runs.items():
        folder = Path(root) / layout.run_dir(run)
        path = folder / layout.SETTINGS
        if not (folder / FINAL_STATE).is_file() or not path.is_file():
            continue  # never finished: resumed as always
        try:
            old = yaml.load(path.read_text(), Loader=_Loader)
        except (OSError, yaml.YAMLError):
            continue  # unreadable: record_settings writes it again
        if not isinstance(old, dict) or not is_finished(folder, old):
            continue
        diff = differences(old, settings)
        if diff:
            holds, count = contents(folder, old)
            found.append(Changed(run, tuple(diff), holds, count, bool(getattr(settings, SWITCH))))
    return found


def _groups(changed: list[Changed]) -> list[list[Changed]]:
    """Runs with the same differences together (a study's seeds of one experiment)."""
    groups: dict[str, list[Changed]] = {}
    for c in changed:
        groups.setdefault(repr(c.differences), []).append(c)
    return list(groups.values())


def _describe(group: list[Changed]) -> list[str]:
    first = group[0]
    if len(group) == 1:
        where = (
            f"{layout.run_dir(first.run)} holds a finished run ({first.holds}; {first.files} files); "
            "its settings.yaml -> this config:"
        )
    else:
        names = ", ".join(layout.run_dir(c.run) for c in group[:RUNS_SHOWN])
        more = f" and {len(group) - RUNS_SHOWN} more" if len(group) > RUNS_SHOWN else ""
        where = (
            f"{len(group)} finished runs ({names}{more}; {sum(c.files for c in group)} files); "
            "their settings.yaml -> this config:"
        )
    lines = [f"  {where}"]
    lines += [f"    {k}: {show(a)} -> {show(b)}" for k, a, b in first.differences[:SHOWN]]
    if len(first.differences) > SHOWN:
        lines.append(f"    ... and {len(first.differences) - SHOWN} more")
    return lines


def message(changed: list[Changed]) -> str:
    """Why the run stops, and the two ways on."""
    lines = ["sparta: a finished run would be rebuilt with other settings; stopped before any job."]
    for group in _groups(changed):
        lines += _describe(group)
    lines += [
        "Snakemake would rerun every job these settings reach and replace its finished files "
        "(snakemake -n --config replace_finished=true lists those jobs and runs none). Either:",
        "  - keep the finished run: give the new settings a name of their own "
        "(experiment: <new name> in your config, or --config experiment=<new name>); or",
        "  - replace it: run the same command with --config replace_finished=true (that command only; "
        "this is also how you edit a setting of your own run and rerun what it changes).",
        "Keys that change no output (train.*, resources.*) never stop a run; a run that has not "
        "finished resumes with any change.",
    ]
    return "\n".join(lines)


def check(runs: dict[str, Settings], root: str | Path = ".") -> list[Changed]:
    """Stop (:class:`FinishedRunChanged`) when a run would rebuild a finished run of its name
    with other settings and its ``replace_finished`` is off; the finished runs it replaces with
    it on are said on stderr. Returns the finished runs that changed."""
    changed = changed_runs(runs, root)
    refused = [c for c in changed if not c.replace]
    if refused:
        raise FinishedRunChanged(message(refused))
    for c in changed:
        keys = ", ".join(f"{k} {show(a)} -> {show(b)}" for k, a, b in c.differences[:SHOWN])
        where = layout.run_dir(c.run)
        print(f"sparta: note: replacing the finished run {where} ({SWITCH}): {keys}", file=sys.stderr)
    return changed
