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
