"""One place for each setting: the schema and the settings dataclasses describe the same keys,
defaults live only in the dataclasses, and a job rebuilds exactly the settings it was given."""

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from sparta.settings import (
    SECTIONS,
    JobSettings,
    Settings,
    SettingsError,
    as_data,
    build,
    section_data,
)

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
DEFAULT = yaml.safe_load((REPO / "config.yaml").read_text())


def _dataclass_of(hint):
    """The dataclass a field holds (directly, optionally, or as items of a tuple/dict)."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _dataclass_of(arg)
        if found is not None:
            return found
    return None


def _compare(cls, schema: dict, where: str, problems: list[str]) -> None:
    props = schema.get("properties")
    if props is None:  # a list or map of objects
        inner = schema.get("items") or schema.get("additionalProperties")
        props = inner["properties"]
    fields = {f.name for f in dataclasses.fields(cls)}
    extra = {"preset"} if where == "reputation" else {"study"} if where == "" else set()
    if set(props) != fields | extra:
        problems.append(
            f"{where}: only in the schema {sorted(set(props) - fields - extra)}, "
            f"only in the dataclass {sorted(fields - set(props))}"
        )
    hints = typing.get_type_hints(cls)
    for name in fields & set(props):
        inner = _dataclass_of(hints[name])
        if inner is not None:
            _compare(inner, props[name], f"{where}.{name}" if where else name, problems)


def test_schema_and_settings_have_the_same_keys():
    problems: list[str] = []
    _compare(Settings, SCHEMA, "", problems)
    assert not problems, problems


def test_the_schema_holds_no_defaults():
    """Defaults are written once, in sparta/settings.py (and reputation presets)."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if "default" in node:
                found.append(where)
            for key, sub in node.items():
                walk(sub, f"{where}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                walk(sub, f"{where}[{i}]")

    walk(SCHEMA, "schema")
    assert not found, found


def test_every_field_is_documented_in_the_schema():
    missing = []

    def walk(node, where):
        for key, sub in node.get("properties", {}).items():
            if "description" not in sub:
                missing.append(f"{where}.{key}")
            walk(sub, f"{where}.{key}")
            for inner in ("items", "additionalProperties"):
                if isinstance(sub.get(inner), dict):
                    walk(sub[inner], f"{where}.{key}[]")

    walk(SCHEMA, "")
    assert not missing, missing


def test_default_settings_resolve_and_round_trip_through_params():
    validate(DEFAULT, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    s = Settings.from_config(DEFAULT)
    assert s.generation.max_new_tokens == 48 and s.generation.temperature == 0.7  # file, default
    assert s.sft.lr_scheduler == "cosine" and s.sft.warmup_ratio == 0.1  # once drifted
    assert s.evaluation.tasks[0].max_examples == 24 and s.evaluation.tasks[0].prompt_column == "prompt"
    assert s.base_folder("smollm2") == "results/_bases/smollm2"
    params = section_data(s, *SECTIONS)
    job = JobSettings(type("Params", (), params))
    for name in SECTIONS:
        value = getattr(job, name)
        assert isinstance(value, SECTIONS[name]), name
        assert as_data(value, params=True) == params[name], name
        if name not in ("runtime", "backend"):  # keys left out at their default come back
            assert value == getattr(s, name), name
    assert job.runtime.system_prompt == s.system_prompt and job.backend.name == "hf"
    assert job.reputation == s.reputation


def test_presets_and_overrides():
    paper = Settings.from_config({**DEFAULT, "reputation": {"preset": "paper", "window": 5}}).reputation
    assert (paper.kappa_start, paper.scale, paper.ddof, paper.window) == (1.0, 1.0, 1, 5)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"generation": {"max_new_tokens": 8, "temprature": 1}}, "generation: unknown key(s) ['temprature']"),
        ({"matchmaking": {"alpha": 1.5}}, "matchmaking: matchmaking alpha must be in [0, 1]"),
        (
            {"reputation": {"scale": 0}},
            "reputation: reputation settings: scale must be in [0.01, 10000], got 0",
        ),
        ({"prompts": {"file": "x.jsonl"}}, "prompts: missing key(s) ['prompt_column']"),
    ],
)
def test_bad_settings_name_their_key(change, message):
    with pytest.raises(SettingsError) as e:
        Settings.from_config({**DEFAULT, **change})
    assert message in str(e.value)


def test_build_converts_nested_types():
    s = build(Settings, {**DEFAULT, "reputation": None}, "")
    assert isinstance(s.members, tuple) and s.members[0].name == "adder"
    assert isinstance(s.lora.target_modules, tuple) and isinstance(s.dpo.learning_rate, float)


def test_the_pure_core_imports_no_model_library():
    """Judge prompts, parsing, sanitising, reputation and match-making are plain Python: a
    table job or a test of them never pays for torch."""
    import subprocess
    import sys

    code = (
        "import sys, sparta.judging, sparta.reputation, sparta.matchmaking, sparta.settings;"
        "print(','.join(m for m in ('torch', 'transformers', 'peft', 'trl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout
