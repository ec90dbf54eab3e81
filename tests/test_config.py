"""The config schema documents every key, and the embedded default validates against it."""

from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from sparta.reputation import ReputationSettings
from sparta.settings import Settings

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_default_config_validates_and_gets_defaults():
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(SCHEMA))
    s = Settings.from_config(config)
    assert s.dpo.beta == 0.1 and s.judge.mode == "expected"
    assert s.matchmaking.alpha == 0.6 and s.matchmaking.rounds_per_iteration == 1
    assert s.reputation == ReputationSettings()  # the default preset, sparta


def test_vllm_backend_needs_gpus_for_its_shards():
    from sparta.config import _check_backend

    config = yaml.safe_load((REPO / "workflow" / "configs" / "paper.yaml").read_text())
    validate(config, str(SCHEMA))
    assert _check_backend(Settings.from_config(config)) == []
    config["vllm"]["tensor_parallel_size"] = 2
    problems = _check_backend(Settings.from_config(config))
    assert len(problems) == 3 and "resources.judge.gpu is 1" in problems[1]
    config["device"] = "cpu"
    assert "but device is cpu" in _check_backend(Settings.from_config(config))[0]
    # vLLM's CPU build: one engine process on a CPU job (gpu 0)
    config["vllm"]["tensor_parallel_size"] = 1
    config["resources"] = {s: {"gpu": 0} for s in ("combat", "judge", "evaluate")}
    assert _check_backend(Settings.from_config(config)) == []
    config["backend"] = "hf"
    assert _check_backend(Settings.from_config(config)) == []


def test_a_key_written_twice_in_a_config_file_is_refused(tmp_path):
    """PyYAML keeps the second of two equal keys silently; every file snakemake reads
    (workflow.configfiles: config.yaml and each --configfile) is read again with a loader that
    refuses it, before the schema, naming the file, the line and the key."""
    from sparta.config import ConfigError, check_config_files, load_yaml

    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "experiment: x\nprompts:\n  file: a.jsonl\ngeneration:\n  max_new_tokens: 8\n"
        "  max_new_tokens: 16\nprompts:\n  file: b.jsonl\n"
    )
    listed = tmp_path / "listed.json"  # JSON is YAML too; a list item's keys are checked as well
    listed.write_text('{"members": [{"name": "a", "base": "x", "name": "b"}]}')
    anchors = tmp_path / "anchors.yaml"  # a key of its own over a merged one (<<) is YAML's override
    anchors.write_text(
        "common: &c {batch_size: 4, max_new_tokens: 8}\ngeneration:\n  <<: *c\n  batch_size: 2\n"
    )
    check_config_files([REPO / "config.yaml", anchors])
    assert load_yaml(anchors.read_text())["generation"] == {"batch_size": 2, "max_new_tokens": 8}
    with pytest.raises(ConfigError) as e:
        check_config_files([REPO / "config.yaml", twice, listed])
    lines = str(e.value).splitlines()
    assert lines[1] == (
        f"  - {twice} line 6: generation.max_new_tokens is written twice in one mapping (first on line 5), "
        "and YAML keeps only the second: remove one, or merge the two into one"
    )
    assert lines[2].startswith(
        f"  - {twice} line 7: prompts is written twice in one mapping (first on line 2)"
    )
    assert f"{listed} line 1: members[0].name is written twice" in lines[3] and len(lines) == 4


def test_sparta_config_refuses_a_key_written_twice(tmp_path, capsys, monkeypatch):
    from sparta.cli import main

    monkeypatch.chdir(REPO)
    twice = tmp_path / "twice.yaml"
    twice.write_text("prompts:\n  per_iteration: 5\niterations: 1\nprompts:\n  per_iteration: 6\n")
    assert main(["config", "--configfile", str(twice)]) == 2
    err = capsys.readouterr().err
    assert f"{twice} line 4: prompts is written twice in one mapping (first on line 1)" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
