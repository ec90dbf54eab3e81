"""The config schema documents every key, and the embedded default validates against it."""

from pathlib import Path

import yaml
from snakemake.utils import validate

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_every_key_has_a_description():
    missing = []

    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            where = f"{path}.{key}" if path else key
            if "description" not in sub:
                missing.append(where)
            walk(sub, where)
            if isinstance(sub.get("items"), dict):
                walk(sub["items"], where + "[]")

    walk(yaml.safe_load(SCHEMA.read_text()), "")
    assert not missing, f"keys without a description: {missing}"


def test_default_config_validates_and_gets_defaults():
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(SCHEMA))
    assert config["dpo"]["beta"] == 0.1 and config["judge"]["mode"] == "expected"
    assert config["matchmaking"]["alpha"] == 0.6 and config["matchmaking"]["rounds_per_iteration"] == 1
    assert config["reputation"]["preset"] == "authors"


def test_vllm_backend_needs_gpus_for_its_shards():
    from sparta.config import _check_backend

    config = yaml.safe_load((REPO / "workflow" / "configs" / "paper.yaml").read_text())
    validate(config, str(SCHEMA))
    assert _check_backend(config) == []
    config["vllm"]["tensor_parallel_size"] = 2
    problems = _check_backend(config)
    assert len(problems) == 3 and "resources.judge.gpu is 1" in problems[1]
    config["device"] = "cpu"
    assert "CUDA GPUs only" in _check_backend(config)[0]
    config["backend"] = "hf"
    assert _check_backend(config) == []
