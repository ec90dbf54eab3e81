"""The config schema documents every key, and the embedded default validates against it."""

from pathlib import Path

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
    assert "CUDA GPUs only" in _check_backend(Settings.from_config(config))[0]
    config["backend"] = "hf"
    assert _check_backend(Settings.from_config(config)) == []
