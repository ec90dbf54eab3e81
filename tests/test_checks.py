"""Bad input stops before any job, with the key or file to fix: every case goes through the
same two checks a run makes first (the JSON schema, then sparta.config.load), in process."""

import copy
import json

import pytest

from sparta import config as sparta_config
from sparta.settings import Settings

from .workflow_helpers import stand_in_safetensors, tiny_config


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_base):
    """A folder with the files bad configs point at."""
    root = tmp_path_factory.mktemp("world")
    (root / "no_weights").mkdir()
    (root / "no_weights" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    for name, config, weights in (
        ("lora", {"peft_type": "LORA", "r": 8}, True),
        ("not_peft", {"hidden_size": 8}, True),
        ("no_weights_adapter", {"peft_type": "LORA", "r": 8}, False),
        ("broken_json", None, True),
    ):
        folder = root / name
        folder.mkdir()
        text = json.dumps(config) if config is not None else "{not json"
        (folder / "adapter_config.json").write_text(text)
        if weights:
            stand_in_safetensors(folder / "adapter_model.safetensors")
    # models and adapters by content: the tiny base copied, then one thing broken in each copy
    import shutil

    from sparta.modelfiles import weight_shapes

    for name in ("truncated", "encoder", "no_template"):
        shutil.copytree(tiny_base, root / name)
    weights = root / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    config = json.loads((root / "encoder" / "config.json").read_text())
    (root / "encoder" / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    for f in ("chat_template.jinja", "chat_template.json"):
        (root / "no_template" / f).unlink(missing_ok=True)
    tok = json.loads((root / "no_template" / "tokenizer_config.json").read_text())
    tok.pop("chat_template", None)
    (root / "no_template" / "tokenizer_config.json").write_text(json.dumps(tok))
    module, (out_features, in_features) = next(
        (k.removesuffix(".weight"), v)
        for k, v in weight_shapes(tiny_base).items()
        if k.endswith("q_proj.weight")
    )
    lora = {"peft_type": "LORA", "r": 2}
    peft = f"base_model.model.{module}"  # the names PEFT saves a LoRA of ``module`` under
    for name, tensors in (  # made for another base: other widths, or a module this base lacks
        (
            "other_base",
            {f"{peft}.lora_A.weight": [2, in_features + 8], f"{peft}.lora_B.weight": [out_features, 2]},
        ),
        ("alien_module", {"base_model.model.model.vision.proj.lora_A.weight": [2, 4]}),
    ):
        (root / name).mkdir()
        (root / name / "adapter_config.json").write_text(json.dumps(lora))
        stand_in_safetensors(root / name / "adapter_model.safetensors", tensors)
    rows = [{"prompt": f"Capital number {i}?", "answer": a} for i, a in enumerate(["B", "(c)", "Paris", "A"])]
    (root / "mc_words.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = [{"prompt": f"What is {i} + 1?", "answer": None if i == 2 else str(i + 1)} for i in range(4)]
    (root / "gap_answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "null_prompts.jsonl").write_text('{"prompt": "What is 2 + 2?"}\n{"prompt": null}\n')
    return root


def problems(cfg: dict, root) -> str:
    """The message a run would stop with, or '' when the config is accepted."""
    cfg = copy.deepcopy(cfg)
    try:
        sparta_config.validate(cfg)
        sparta_config.load(cfg, root)
    except sparta_config.ConfigError as e:
        return str(e)
    return ""


def in_world(value, world):
    """``value`` with every "WORLD/..." string made a path in the world folder."""
    if isinstance(value, str) and value.startswith("WORLD/"):
        return str(world / value.removeprefix("WORLD/"))
    if isinstance(value, dict):
        return {k: in_world(v, world) for k, v in value.items()}
    if isinstance(value, list):
        return [in_world(v, world) for v in value]
    return value


def with_change(cfg: dict, change: dict, world) -> dict:
    cfg = copy.deepcopy(cfg)
    for key, value in in_world(change, world).items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def test_the_tiny_config_is_accepted(tiny_base, world):
    assert problems(tiny_config(tiny_base), world) == ""


SCHEMA_CASES = [
    ({"seed": -1}, "seed"),
    ({"iterations": 0}, "iterations"),
    ({"generation": {"top_p": 5}}, "top_p"),
    ({"generation": {"temperature": -0.5}}, "temperature"),
    ({"reputation": {"kappa_start": -1}}, "kappa_start"),
    ({"reputation": {"scale": 0}}, "scale"),
    ({"dpo": {"lr_scheduler": "cosinus"}}, "lr_scheduler"),
    ({"dpo": {"learning_rate": 0}}, "learning_rate"),
    ({"sft": {"warmup_ratio": 1.5}}, "warmup_ratio"),
    ({"lora": {"dropout": 1.0}}, "dropout"),
    ({"matchmaking": {"alpha": 1.2}}, "alpha"),
    ({"prompts": {"validation": 0.95}}, "validation"),
    ({"judge": {"mode": "vibes"}}, "mode"),
    ({"iteratons": 3}, "iteratons"),
    ({"members": [{"name": "a b", "base": "tiny"}]}, "name"),
]

WORLD_CASES = [
    ({"prompts": {"validation": 0.5, "test": 0.5}}, "leave none of the 400 prompts for alignment"),
    ({"prompts": {"per_iteration": 500}}, "prompts.per_iteration (500) is larger than the alignment split"),
    ({"prompts": {"file": "WORLD/null_prompts.jsonl", "answer_column": None, "id_column": None}}, "null"),
    ({"base_models": {"tiny": {"path": "/no/such/model"}}}, "base_models.tiny.path"),
    ({"base_models": {"tiny": {"path": "WORLD/no_weights"}}}, "has a config.json but no weights"),
    ({"base_models": {"tiny": {"path": "WORLD/truncated"}}}, "model.safetensors is truncated"),
    ({"base_models": {"tiny": {"path": "WORLD/encoder"}}}, "is a BertModel, not a causal language model"),
    ({"base_models": {"tiny": {"path": "WORLD/no_template"}}}, "has no chat template"),
    (
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/other_base"} for n in "abc"]},
        "the adapter was made for another base model",
    ),
    (
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/alien_module"} for n in "abc"]},
        "adapts model.vision.proj, which",
    ),
    (
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/no_weights_adapter"} for n in "abc"]},
        "has no adapter weights",
    ),
    (
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/not_peft"} for n in "abc"]},
        "is not a PEFT LoRA config",
    ),
    (
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/broken_json"} for n in "abc"]},
        "is not valid JSON",
    ),
    ({"members": [{"name": n, "base": "tiny", "adapter": "WORLD/nowhere"} for n in "abc"]}, "adapter"),
    ({"members": [{"name": n, "base": "tiny"} for n in "aab"]}, "names must be unique"),
    ({"members": [{"name": n, "base": "tiny"} for n in "ab"]}, "at least 3 members"),
    ({"members": [{"name": n, "base": "tiny", "sft_domain": "poetry"} for n in "abc"]}, "no SFT data file"),
    (
        {"evaluation": {"tasks": [{"name": "open", "source": "prompts", "metric": "judge_score"}]}},
        "needs evaluation.judge",
    ),
    ({"evaluation": {"judge": {"base": "/no/judge"}}}, "evaluation.judge.base"),
    ({"evaluation": {"tasks": [{"name": "gsm", "file": "/no/gsm.jsonl"}]}}, "does not exist"),
    ({"backend": "vllm", "device": "cpu"}, "backend: vllm runs on CUDA GPUs only"),
    (
        {
            "evaluation": {
                "tasks": [
                    {
                        "name": "mc",
                        "file": "WORLD/mc_words.jsonl",
                        "metric": "multiple_choice",
                        "answer_column": "answer",
                    }
                ]
            }
        },
        "000002 ('Paris'); write the right option's letter",
    ),
    (
        {
            "evaluation": {
                "tasks": [
                    {
                        "name": "sums",
                        "file": "WORLD/gap_answers.jsonl",
                        "metric": "exact_match",
                        "answer_column": "answer",
                    }
                ]
            }
        },
        "rows have no answer (metric exact_match scores against it)",
    ),
]


@pytest.mark.parametrize("change, key", SCHEMA_CASES + WORLD_CASES)
def test_bad_config_names_what_to_fix(tiny_base, world, change, key):
    message = problems(with_change(tiny_config(tiny_base), change, world), world)
    assert key in message, message


def test_a_cuda_device_on_a_machine_without_one_stops_a_local_run(tiny_base):
    import torch

    settings = Settings.from_config(tiny_config(tiny_base, device="cuda"))
    if torch.cuda.is_available():
        sparta_config.check_local_device(settings)  # a GPU machine: fine
        return
    with pytest.raises(sparta_config.ConfigError, match="device: cuda"):
        sparta_config.check_local_device(settings)
