"""The pool of a config checked before any job: at least three members with unique names, each
base model a member uses, each member's base, adapter and SFT data, and the judge models of a run
(evaluation's judge, sppo's annotator), found on disk or, for an ``hf://`` hub id, in the
Hugging Face cache (never the network); :mod:`sparta.modelfiles` reads what they hold.

Pure: no model, no heavy import.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import hub
from .data import PromptFileError, read_table_file
from .modelfiles import (
    ModelFileError,
    adapter_problems,
    backend_adapter_problems,
    gguf_path,
    model_problems,
    target_problems,
)

WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def model_folder_problems(folder: Path, key: str, notes: list[str] | None = None) -> list[str]:
    """A Hugging Face model folder: config.json and weights (a hub id: its cached snapshot)."""
    folder = hub.config_folder(folder, key, "model", notes)
    if isinstance(folder, list):
        return folder
    if not (folder / "config.json").is_file():
        return [f"{key}: {folder} is not a model folder (no config.json)"]
    if not any(any(folder.glob(pattern)) for pattern in WEIGHTS):
        return [f"{key}: {folder} has a config.json but no weights (*.safetensors or pytorch_model*.bin)"]
    return model_problems(folder, key)


def adapter_folder_problems(
    folder: Path, key: str, notes: list[str] | None = None, base: Path | None = None, backend: str = "hf"
) -> list[str]:
    """A PEFT adapter folder: a LoRA adapter_config.json and the adapter's weights (a hub id:
    its cached snapshot), LoRA features the ``backend`` serves, and when its ``base`` folder is
    at hand, LoRA shapes that fit it."""
    folder = hub.config_folder(folder, key, "adapter", notes)
    if isinstance(folder, list):
        return folder
    if base is not None:  # a hub id's cached snapshot; not downloaded or not converted yet: no shapes
        base = hub.config_folder(base, key, "model", None)
        base = None if isinstance(base, list) else Path(base)
    config = folder / "adapter_config.json"
    if not config.is_file():
        return [f"{key}: {folder} is not a PEFT adapter folder (no adapter_config.json)"]
    try:
        data = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return [f"{key}: {config} is not valid JSON ({e})"]
    kind = data.get("peft_type") if isinstance(data, dict) else None
    if kind != "LORA":
        return [
            f"{key}: {config} is not a PEFT LoRA config (peft_type {kind!r}; sparta serves LoRA adapters)"
        ]
    if not any((folder / w).is_file() for w in ADAPTER_WEIGHTS):
        return [f"{key}: {folder} has no adapter weights (adapter_model.safetensors)"]
    problems, partly = target_problems(folder, base, key)
    if notes is not None:
        notes.extend(partly)
    return backend_adapter_problems(folder, key, backend) + (problems or adapter_problems(folder, base, key))


def judge_model_problems(root: Path, model, key: str, notes: list[str] | None, backend: str) -> list[str]:
    """A judge model of the config ({base, adapter}): its model folder, its adapter on it."""
    problems = model_folder_problems(root / model.base, f"{key}.base", notes)
    if model.adapter:
        problems += adapter_folder_problems(
            root / model.adapter, f"{key}.adapter", notes, root / model.base, backend
        )
    return problems


def empty_problems(where: str, values: dict[str, str | None]) -> list[str]:
    """An adapter or sft_domain written as empty text: refused, as it would run the plain
    base without a word."""
    what = {"adapter": "a PEFT adapter folder or an hf:// hub id", "sft_domain": "the domain of its SFT data"}
    return [
        f"{where}.{key}: {value!r} is empty; give {what[key]}, or leave {key} out (null) for the plain base"
        for key, value in values.items()
        if value is not None and not value.strip()
    ]


def pool_problems(settings, root: Path, notes: list[str]) -> list[str]:
    """At least 3 members, unique names, each base model a member uses found, and each
    member's base (a key of base_models or a model folder) and adapter against that base."""
    members = settings.members
    problems = []
    if len(members) < 3:
        problems.append(
            f"members: a Sparta pool needs at least 3 members (2 combatants and a judge), got {len(members)}"
        )
    names = [m.name for m in members]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"members: names must be unique; repeated: {dupes}")
    used = {m.base for m in members}  # a base no member names (config.yaml's, merged) is never loaded
    for name, spec in settings.base_models.items():
        if name in used:
            problems += _base_model_problems(f"base_models.{name}", spec, root, notes)
    for i, m in enumerate(members):
        problems += _member_problems(f"members[{i}] ({m.name})", m, settings, root, notes)
    return problems


def _base_model_problems(where: str, spec, root: Path, notes: list[str]) -> list[str]:
    if spec.path is not None and (spec.gguf_package is not None or spec.gguf_file is not None):
        return [f"{where}: give either path or gguf_package + gguf_file"]
    if spec.path is not None:
        return model_folder_problems(root / spec.path, f"{where}.path", notes)
    if not (spec.gguf_package and spec.gguf_file):
        return [f"{where}: give path, or gguf_package and gguf_file"]
    try:
        gguf_path(spec.gguf_package, spec.gguf_file)
    except ModelFileError as e:
        return [str(e)]
    return []


def _member_problems(where: str, m, settings, root: Path, notes: list[str]) -> list[str]:
    problems = empty_problems(where, {"adapter": m.adapter, "sft_domain": m.sft_domain})
    if m.base not in settings.base_models:
        if hub.is_ref(m.base):
            problems += model_folder_problems(root / m.base, f"{where}.base", notes)
        elif (root / m.base / "config.json").is_file():
            problems += model_folder_problems(root / m.base, f"{where}.base")
        else:
            problems.append(
                f"{where}.base: {m.base!r} is neither a key of base_models nor a model folder "
                "with config.json"
            )
    if m.adapter and m.sft_domain:
        problems.append(f"{where}: give adapter or sft_domain, not both")
    if m.adapter:
        base = root / settings.base_folder(m.base)  # a GGUF base not yet converted: no shapes
        problems += adapter_folder_problems(
            root / m.adapter, f"{where}.adapter", notes, base, settings.backend
        )
    if m.sft_domain:
        path = root / settings.sft.data_dir / f"{m.sft_domain}.jsonl"
        problems += _sft_problems(path, where, settings.sft.examples)
    return problems


def _sft_problems(path: Path, where: str, examples: int) -> list[str]:
    if not path.is_file():
        return [f"{where}.sft_domain: no SFT data file {path}"]
    try:
        data = read_table_file(path, "SFT data file", "sft.data_dir")
    except PromptFileError as e:
        return [str(e)]
    if len(data) == 0 or not {"prompt", "response"} <= set(data.columns):
        return [f"{where}.sft_domain: {path} needs rows with prompt and response columns"]
    if data[["prompt", "response"]].isna().any().any():
        return [f"{where}.sft_domain: {path} has empty (null) prompts or responses"]
    if len(data) < examples:
        return [
            f"{where}.sft_domain: {path} has {len(data)} examples but sft.examples is {examples}: "
            f"lower sft.examples to {len(data)} or add examples"
        ]
    return []
