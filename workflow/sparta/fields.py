"""How a setting is declared: once, as a dataclass field with its default, help text, bounds
and (through a ``Literal[...]`` type) its choices.

The config schema (``workflow/schemas/config.schema.yaml``) and the docs' constants table
(``docs/reference/constants.md``) are generated from these declarations
(``python -m sparta.docgen --write``); a dataclass that checks its own values
(:func:`check_fields`) reads the same bounds and choices.

Pure: no import of the rest of sparta.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal

BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}
"""Bound keywords of :func:`setting` and the JSON-schema keyword of each."""

MISSING = dataclasses.MISSING

MAX_TOKENS = 2**20
"""The ceiling of every token length (1,048,576): longer than the context of any model sparta
runs, so a value above it is a typo even before a base's own context is known."""


def setting(
    default: Any = MISSING,
    *,
    help: str,
    factory: Any = MISSING,
    ge: float | None = None,
    le: float | None = None,
    gt: float | None = None,
    lt: float | None = None,
    schema: dict | None = None,
    added: str | None = None,
    shared: tuple[str, ...] = (),
    **table: Any,
) -> Any:
    """A dataclass field: its default (or ``factory``), its help text, numeric bounds (ge >=,
    le <=, gt >, lt <) and ``schema``: JSON-schema keywords the type and bounds cannot say
    (a pattern, minItems, or a type that replaces the derived one). Keywords ``constant``,
    ``source``, ``shown``, ``authors`` and ``paper`` put the setting in the docs'
    constants table (see :mod:`sparta.schema`). ``added`` (what brought it) marks a setting
    added after runs were made: at its default it is left out of the job params
    (:func:`sparta.settings.as_data`), so a finished run resumes with nothing recomputed.
    ``shared`` says what a study shares by it (:func:`shared_by`): ``pool``, the initial pool
    and prompt splits are made from it; ``study``, one value for every experiment of a study."""
    bounds = {k: v for k, v in {"ge": ge, "gt": gt, "le": le, "lt": lt}.items() if v is not None}
    metadata = {"help": help, "bounds": bounds, "schema": dict(schema or {}), "table": table}
    if added is not None:
        metadata["added"] = added
    if shared:
        metadata["shared"] = tuple(shared)
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def inherit(base: type, name: str, default: Any, help: str | None = None, **table: Any) -> Any:
    """The field ``name`` of the dataclass ``base`` with another default (and, optionally, its
    help text or table entry replaced): a subclass redeclares only what differs."""
    (found,) = [f for f in dataclasses.fields(base) if f.name == name]
    metadata = dict(found.metadata)
    if help is not None:
        metadata["help"] = help
    if table:
        metadata["table"] = table
    return dataclasses.field(default=default, metadata=metadata)


def shared_by(source: type, what: str) -> tuple[str, ...]:
    """The fields of the dataclass ``source`` declared ``shared=(..., what, ...)``, in order."""
    return tuple(f.name for f in dataclasses.fields(source) if what in f.metadata.get("shared", ()))


def choices(hint: Any) -> tuple | None:
    """The values a ``Literal[...]`` hint (or ``Literal[...] | None``) allows, None left out;
    None when the hint is no Literal."""
    hint = unwrap(hint)
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def problems(obj: Any) -> list[str]:
    """What breaks the bounds and choices declared on the fields of the dataclass ``obj``."""
    hints = typing.get_type_hints(type(obj))
    found = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        allowed = choices(hints[f.name])
        if allowed is not None and value not in allowed:
            found.append(f"{f.name} must be one of {', '.join(map(str, allowed))}, got {value!r}")
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number:
            continue
        if unwrap(hints[f.name]) is int and isinstance(value, float) and not value.is_integer():
            found.append(f"{f.name} must be an integer, got {value}")
            continue
        if isinstance(value, float) and not math.isfinite(value):
            found.append(f"{f.name} must be a finite number, got {value}")
            continue
        bounds = f.metadata.get("bounds", {})
        low = ("ge" in bounds and value < bounds["ge"]) or ("gt" in bounds and value <= bounds["gt"])
        high = ("le" in bounds and value > bounds["le"]) or ("lt" in bounds and value >= bounds["lt"])
        if low or high:
            found.append(f"{f.name} must be {bounds_text(bounds)}, got {value}")
    return found


def bounds_text(bounds: dict) -> str:
    """``in [0, 1]``, ``in (0, 1]``, ``>= 2``...: the bounds of a setting in words."""
    low = [(k, bounds[k]) for k in ("ge", "gt") if k in bounds]
    high = [(k, bounds[k]) for k in ("le", "lt") if k in bounds]
    if low and high:
        (lk, lv), (hk, hv) = low[0], high[0]
        return f"in {'[' if lk == 'ge' else '('}{lv}, {hv}{']' if hk == 'le' else ')'}"
    words = {"ge": ">=", "le": "<=", "gt": ">", "lt": "<"}
    return " and ".join(f"{words[k]} {v}" for k, v in low + high)


def unwrap(hint: Any) -> Any:
    """The type of a hint without None (``int | None`` is int; a union of two types stays)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner[0] if len(inner) == 1 else hint
    return hint


def check_fields(obj: Any, error: type[Exception] = ValueError, prefix: str = "") -> None:
    """Raise ``error`` naming every value of ``obj`` outside its declared bounds or choices
    (each after ``prefix``)."""
    found = problems(obj)
    if found:
        raise error("; ".join(prefix + problem for problem in found))


def subset(source: type, names: tuple[str, ...], name: str, doc: str) -> type:
    """A frozen dataclass of the fields ``names`` of the dataclass ``source``, declared there
    (types, defaults, help and bounds alike), in that order."""
    hints = typing.get_type_hints(source)
    by_name = {f.name: f for f in dataclasses.fields(source)}
    spec = []
    for key in names:
        f = by_name[key]
        copy = dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata)
        spec.append((key, hints[key], copy))
    made = dataclasses.make_dataclass(name, spec, frozen=True)
    made.__module__ = source.__module__  # pickled and shown as the source's
    made.__doc__ = doc
    return made
