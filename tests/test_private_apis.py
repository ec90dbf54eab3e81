"""Guards on the libraries' private and internal names that sparta relies on where a change
would otherwise go unnoticed: the library would simply stop calling sparta's override, or
ignore an attribute sparta sets, and the run would go on slower or differently without an
error. Each test fails with the name that moved. The catalogue of every such use, why it is
kept and which test guards it: docs/development/private-apis.md. Uses whose change fails
loudly on its own are guarded by the tests that exercise them (named there)."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from types import SimpleNamespace

import pytest
import torch


class Reached(Exception):
    """Raised by a stand-in model: the library called the model it was handed."""

    def __init__(self, kwargs):
        self.kwargs = kwargs


def _called_with(**kwargs) -> None:
    raise Reached(kwargs)


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


# --- transformers: the HF backend's KV cache -----------------------------------------------------


def test_the_kv_cache_name_is_an_argument_and_an_output_of_the_forward():
    """hf.CACHE is read off CausalLMOutputWithPast; a forward whose argument is named otherwise
    would swallow the cache in its **kwargs and compute every step without it."""
    from transformers import LlamaForCausalLM
    from transformers.modeling_outputs import CausalLMOutputWithPast

    from sparta.backends.hf import CACHE

    assert CACHE in CausalLMOutputWithPast.__dataclass_fields__
    assert CACHE in _params(LlamaForCausalLM.forward), (
        f"transformers' causal LM forward no longer takes {CACHE!r}: set hf.CACHE to its KV cache argument"
    )


def test_the_roomy_layer_is_what_the_cache_builds():
    """roomy_cache sets DynamicCache.layer_class_to_replicate; were it renamed, the cache would
    build DynamicLayers and decoding would copy the whole cache at every step again."""
    from sparta.backends import hf

    cache = hf.roomy_cache(4)
    k, v = torch.zeros(2, 1, 3, 4), torch.ones(2, 1, 3, 4)
    cache.update(k, v, 0)
    cache.update(k, v, 1)
    assert [type(layer).__name__ for layer in cache.layers] == ["RoomyLayer", "RoomyLayer"], (
        "DynamicCache no longer builds its layers through layer_class_to_replicate"
    )
    assert cache.get_seq_length() == 3


# --- TRL: the DPO pair tree and SPPO's trainer -----------------------------------------------------


def test_trl_computes_the_dpo_loss_through_the_private_compute_loss():
    """pair_tree.with_pair_tree overrides DPOTrainer._compute_loss(model, inputs,
    return_outputs): TRL's compute_loss must still hand it the model."""
    from trl import DPOTrainer

    assert _params(DPOTrainer._compute_loss) == ["self", "model", "inputs", "return_outputs"]
    probe = SimpleNamespace(_compute_loss=lambda model, inputs, return_outputs: ("reached", model))
    assert DPOTrainer.compute_loss(probe, "the model", {}) == ("reached", "the model")


def test_trl_calls_the_model_it_is_handed_with_its_fused_head():
    """The pair tree hands TRL a stand-in model (PairCall) and answers the fused call
    (``fused_lm_head=True``, labels) with TRL's output: both the loss and the reference
    log-probabilities must call the model they are handed, that way."""
    from trl import DPOTrainer

    assert _params(DPOTrainer.compute_ref_log_probs) == ["self", "model", "inputs"]
    model = SimpleNamespace(is_gradient_checkpointing=False, training=True)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device="cpu", autocast=contextlib.nullcontext),
        ref_model=object(),
        model=model,
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
        ld_alpha=None,
        aux_loss_enabled=False,
    )
    ids = torch.tensor([[1, 2, 3], [1, 2, 4]])
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "completion_mask": torch.ones_like(ids),
    }
    for call in (
        lambda: DPOTrainer.compute_ref_log_probs(trainer, _called_with, inputs),
        lambda: DPOTrainer._compute_loss(trainer, _called_with, inputs, False),
    ):
        with pytest.raises(Reached) as reached:
            call()
        assert reached.value.kwargs.get("fused_lm_head") is True and "labels" in reached.value.kwargs


def test_trl_precomputes_the_reference_through_compute_ref_log_probs():
    """The reference log-probabilities (precompute_ref_log_probs) go through the method the
    pair tree overrides, not a copy of it."""
    import trl.trainer.dpo_trainer

    assert "self.compute_ref_log_probs(" in inspect.getsource(trl.trainer.dpo_trainer.DPOTrainer)


def test_trls_fused_output_and_kernel_are_what_the_pair_tree_fills_and_calls():
    """pair_tree.forward returns TRL's FusedCausalLMOutput (a field added there may be read by
    TRL's loss and left empty by the tree) and calls TRL's chunked log-prob kernel with
    positional arguments."""
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import FusedCausalLMOutput

    fields = {f.name for f in dataclasses.fields(FusedCausalLMOutput)}
    assert fields == {
        "loss",
        "log_probs",
        "entropy",
        "log_sum_sq_probs",
        "mean_logits",
        "is_top1",
        "label_mask",
        "aux_loss",
    }, f"TRL's fused output changed: {sorted(fields)}; check what pair_tree.forward fills"
    assert _params(ChunkedLogProbFunction.forward) == [
        "ctx",
        "hidden",
        "weight",
        "bias",
        "targets",
        "temperature",
        "chunk_size",
        "final_logit_softcapping",
        "logit_scale",
        "outputs",
    ]


def test_the_trainer_keeps_the_columns_its_signature_hook_names():
    """SPPO's trainer adds the win probabilities in _set_signature_columns_if_needed (transformers'
    Trainer, overridden by TRL): the dataset keeps exactly self._signature_columns."""
    from transformers import Trainer
    from trl import DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    assert "self._set_signature_columns_if_needed()" in inspect.getsource(Trainer._remove_unused_columns)
    assert "self._signature_columns" in inspect.getsource(Trainer._remove_unused_columns)
    probe = SimpleNamespace(_signature_columns=None, _is_vision_dataset=False)
    DPOTrainer._set_signature_columns_if_needed(probe)
    assert "chosen_ids" in probe._signature_columns
    assert _params(DataCollatorForPreference.torch_call) == ["self", "examples"]


# --- PEFT, transformers, TRL: the table of sparta.libpatches ----------------------------------------


def _tiny_llama(vocab: int = 48):
    """A one-layer Llama built in memory (milliseconds): what the guards below run."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def test_own_decoding_calls_the_forward_as_generate_does():
    """hf._decode calls the causal LM's forward with the cache argument, ``logits_to_keep`` and
    ``position_ids`` and selects cache rows with ``batch_select_indices``: a greedy decode
    through it answers as ``generate``."""
    from transformers import DynamicCache, LlamaForCausalLM

    from sparta.backends import hf

    assert {hf.CACHE, "logits_to_keep", "position_ids", "use_cache"} <= set(_params(LlamaForCausalLM.forward))
    for name in ("get_seq_length", "batch_select_indices"):
        assert callable(getattr(DynamicCache, name, None)), f"DynamicCache.{name}"
    model, rows = _tiny_llama(), [[5, 6, 7, 8], [9, 10]]
    enc, extra = hf._prefilled(model, rows, None, 0, torch.device("cpu"), 6)
    ours = hf._decode(model, enc, extra[hf.CACHE], None, None, max_new=6, stops=[], pad=0)
    padded = hf._left_padded(rows, 0)
    config = hf._generation_config(6, 0, [])
    theirs = model.generate(**padded, generation_config=config)[:, padded["input_ids"].shape[1] :]
    assert ours == theirs.tolist()


def test_generate_continues_a_prefilled_cache_with_padding_in_the_middle():
    """hf._prefilled hands ``generate`` a cache holding the prompts' shared start and every
    prompt token but the last, rows laid out as start, padding, rest: ``generate`` continues it
    and answers as from the plain left-padded prompts."""
    from sparta.backends import hf

    model, stem = _tiny_llama(), list(range(3, 3 + hf.GENERATE_SHARED_MIN + 2))
    rows = [stem + [20, 21, 22], stem + [30]]
    config = hf._generation_config(5, 0, [])
    enc, extra = hf._prefilled(model, rows, None, 0, torch.device("cpu"), 5)
    assert extra[hf.CACHE].get_seq_length() == enc["input_ids"].shape[1] - 1  # prefilled
    width = enc["input_ids"].shape[1]
    shared = model.generate(**enc, generation_config=config, **extra)[:, width:]
    padded = hf._left_padded(rows, 0)
    plain = model.generate(**padded, generation_config=config)[:, padded["input_ids"].shape[1] :]
    assert shared.tolist() == plain.tolist()


def test_peft_routes_mixed_batches_through_the_replaced_method():
    """libpatches.install replaces peft's lora.Linear._mixed_batch_forward, whose signature and
    layer attributes rows_forward reads; a mixed-adapter forward goes through it and gives
    PEFT's own numbers."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import layer

    from sparta import libpatches
    from sparta.backends import hf

    assert libpatches.install(), "the tests run with the patches on (SPARTA_LIBRARY_PATCHES unset)"
    assert layer.Linear._mixed_batch_forward is libpatches.rows_forward
    own = libpatches._PEFT["forward"]
    assert _params(own)[:2] == ["self", "x"] and "adapter_names" in _params(own)
    assert isinstance(layer.VARIANT_KWARG_KEYS, list)
    lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(_tiny_llama(), lora, adapter_name="one")
    model.add_adapter("two", lora)
    model.eval()
    some = next(m for m in model.modules() if isinstance(m, layer.Linear))
    for name in ("base_layer", "lora_A", "lora_B", "lora_dropout", "scaling", "lora_variant"):
        assert hasattr(some, name), f"lora.Linear.{name}"
    ids, names = torch.arange(12).reshape(4, 3) + 3, ["one", "two", "__base__", "one"]
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return libpatches.rows_forward(*args, **kwargs)

    with torch.no_grad():
        rows = hf.AdapterRows(names, torch.device("cpu"))
        layer.Linear._mixed_batch_forward = counted
        try:
            ours = model(input_ids=ids, adapter_names=rows).logits
        finally:
            layer.Linear._mixed_batch_forward = libpatches.rows_forward
        theirs = model(input_ids=ids, adapter_names=list(names)).logits
    assert len(calls) == 2, "PEFT no longer calls lora.Linear._mixed_batch_forward for mixed batches"
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_sppo_reads_what_trls_dpo_trainer_sets():
    """SPPO's trainer logs into DPOTrainer._metrics and reads precompute_ref_logps, ref_model and
    beta, all set in DPOTrainer.__init__; its collator extends DataCollatorForPreference, which
    trl.trainer.dpo_trainer defines."""
    from trl import DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    source = inspect.getsource(DPOTrainer.__init__)
    for name in ("_metrics", "precompute_ref_logps", "ref_model", "beta"):
        assert f"self.{name} = " in source, f"DPOTrainer.{name}"
    assert "torch_call" in vars(DataCollatorForPreference)


# each entry of sparta.libpatches.PATCHES and the fast tests that guard it
GUARDS = {
    "roomy_cache": ["test_the_roomy_layer_is_what_the_cache_builds"],
    "own_decoding": ["test_own_decoding_calls_the_forward_as_generate_does"],
    "shared_prompts": ["test_generate_continues_a_prefilled_cache_with_padding_in_the_middle"],
    "kv_cache_name": ["test_the_kv_cache_name_is_an_argument_and_an_output_of_the_forward"],
    "row_index": ["test_peft_routes_mixed_batches_through_the_replaced_method"],
    "pair_tree": [
        "test_trl_computes_the_dpo_loss_through_the_private_compute_loss",
        "test_trl_calls_the_model_it_is_handed_with_its_fused_head",
        "test_trl_precomputes_the_reference_through_compute_ref_log_probs",
        "test_trls_fused_output_and_kernel_are_what_the_pair_tree_fills_and_calls",
    ],
    "sppo_columns": ["test_the_trainer_keeps_the_columns_its_signature_hook_names"],
    "sppo_trainer": ["test_sppo_reads_what_trls_dpo_trainer_sets"],
}


def test_every_library_use_has_a_guard_and_a_row_on_the_private_api_page():
    """The table of sparta.libpatches, the guards here and the model-side table of
    docs/development/private-apis.md name the same uses; every switch names a constant."""
    import importlib
    import re
    from pathlib import Path

    from sparta.libpatches import PATCHES

    names = [p.name for p in PATCHES]
    assert sorted(GUARDS) == sorted(names)
    assert all(callable(globals().get(g)) for gs in GUARDS.values() for g in gs)
    page = (Path(__file__).parents[1] / "docs" / "development" / "private-apis.md").read_text()
    section = page.split("## PEFT, transformers and TRL", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `(\w+)` \|", section, re.M) == names
    for p in PATCHES:
        if p.switch:
            module, constant = p.switch.rsplit(".", 1)
            assert isinstance(getattr(importlib.import_module(module), constant), bool), p.switch


def test_an_untested_library_version_names_the_uses_that_may_not_hold(monkeypatch):
    """The installed libraries are the tested ones (requirements.txt); on another version the
    warning names that library's uses (under plain, its required ones only)."""
    from sparta import libpatches

    assert libpatches.version_warning(libpatches.library_versions()) is None
    assert set(libpatches.library_versions()) == set(libpatches.TESTED)
    warning = libpatches.version_warning({"transformers": "5.30.1", "peft": "0.21.2", "trl": "1.16.0"})
    named = {p.name for p in libpatches.PATCHES if f"  {p.name} (" in warning}
    assert named == {p.name for p in libpatches.PATCHES if p.library == "transformers"}
    assert "transformers 5.30.1" in warning and "SPARTA_LIBRARY_PATCHES=plain" in warning
    plain = libpatches.version_warning({"peft": "0.22.0"}, plain=True)
    assert plain is None  # PEFT's one use is off under plain
    plain = libpatches.version_warning({"trl": "1.17.0"}, plain=True)
    assert "sppo_trainer" in plain and "pair_tree" not in plain
    monkeypatch.setenv(libpatches.VARIABLE, "off")
    with pytest.raises(ValueError, match="SPARTA_LIBRARY_PATCHES='off': use plain"):
        libpatches.mode()


PROMPTS = ["What is 3 + 4?", "Tom has 5 apples and gets 2 more.", "What is 2 * 5?", "Score this: 7"]
PAIRS = {
    "prompt": ["What is 3 + 4?", "What is 2 * 5? Show the steps.", "What is 1 + 1?", "Name a number."],
    "chosen": ["It is 7. The answer is 7.", "2 * 5 = 10. The answer is 10.", "2", "Seven"],
    "rejected": ["It is 9.", "It is 25.", "2 and more", "Seven"],
}


def tiny_pool_outputs(root: str, out: str) -> None:
    """The tiny pool's greedy and sampled answers (members mixed, rows leaving their batch),
    judgment scores and one DPO job's adapter, saved to ``out``: what
    :func:`test_the_libraries_as_shipped_give_the_same_tables` runs in a process of its own."""
    import pandas as pd
    from peft.tuners.lora import layer
    from safetensors.torch import load_file

    from sparta import libpatches, pair_tree
    from sparta.backends import hf, open_backend
    from sparta.chat import chat_ids
    from sparta.judging import JudgeItem, judge_duels
    from sparta.members import MemberSpec
    from sparta.settings import BackendSettings, DPOSettings, JudgeSettings, LoraSettings, Runtime, Sampling
    from sparta.train import dpo_members

    hf.stop_token_ids = lambda tok: list(range(3, 400, 9))  # answers end at many lengths
    hf.COMPACT_AT = 0.1
    base = f"{root}/base"
    specs = [
        MemberSpec("ann", base, f"{root}/ann"),
        MemberSpec("bob", base, f"{root}/bob"),
        MemberSpec("cid", base),
    ]
    runtime = Runtime(device="cpu", dtype="float32", system_prompt="sys")
    backend = open_backend(BackendSettings("hf"), runtime, specs)
    asked = [(s, p) for p in PROMPTS for s in specs] * 2
    served = backend.serve_each([s for s, _ in asked])
    texts = [chat_ids(served.tok, p, "sys") for _, p in asked]
    hot = Sampling(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=12)
    answers = {  # (text, tokens, finish reason) of each
        "greedy": served.generate(texts, Sampling.greedy_decoding(12), [0] * len(texts), batch_size=8),
        "sampled": served.generate(texts, hot, list(range(len(texts))), batch_size=8),
    }
    answers = {k: [dataclasses.astuple(g) for g in v] for k, v in answers.items()}
    items = [JudgeItem(p, answer) for p in PROMPTS for answer in ("It is 7.", "Maybe 9.")]
    judges = backend.serve_each([s for s in specs for _ in items])
    scores = [j.score for j in judge_duels(judges, items * len(specs), JudgeSettings(batch_size=5), "sys")]
    dpo = DPOSettings(learning_rate=1e-2, max_length=128)
    dpo_members([(specs[0], f"{out}.dpo", 5)], pd.DataFrame(PAIRS), dpo, LoraSettings(), runtime)
    switches = {k: getattr(hf, k) for k in ("ROOMY_CACHE", "OWN_DECODING", "SHARE_PROMPTS", "ROW_INDEX")}
    torch.save(
        {
            "answers": answers,
            "scores": scores,
            "adapter": load_file(f"{out}.dpo/adapter/adapter_model.safetensors"),
            "switches": {**switches, "PAIR_TREE": pair_tree.PAIR_TREE},
            "replaced": layer.Linear._mixed_batch_forward is libpatches.rows_forward,
        },
        out,
    )


@pytest.mark.slow
def test_the_libraries_as_shipped_give_the_same_tables(tmp_path):
    """SPARTA_LIBRARY_PATCHES=plain (every switch off, PEFT unchanged) and the patches on give
    the tiny pool the same answers, greedy and sampled, and the same judgment scores; a DPO
    job's adapter is the same up to float rounding (the pair tree against TRL's two rows: as a
    whole, 5% of how far training moved it; a leaking tree: 50%)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from .tiny import build_tiny_model

    base = build_tiny_model(tmp_path / "base")
    for k, name in enumerate(("ann", "bob")):
        torch.manual_seed(k)
        lora = LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(tmp_path / name)
    got = {}
    for mode in ("on", "plain"):
        env = {**os.environ, "SPARTA_LIBRARY_PATCHES": mode}
        out = tmp_path / f"{mode}.pt"
        code = (
            f"from tests.test_private_apis import tiny_pool_outputs as t; t({str(tmp_path)!r}, {str(out)!r})"
        )
        run = subprocess.run(
            [sys.executable, "-c", code],
            cwd=Path(__file__).parents[1],
            env=env,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        got[mode] = torch.load(out)
    on, plain = got["on"], got["plain"]
    assert on["replaced"] and all(on["switches"].values())
    assert not plain["replaced"] and not any(plain["switches"].values())
    assert on["answers"] == plain["answers"]
    assert {reason for _, _, reason in on["answers"]["greedy"]} == {"stop", "length"}  # rows left
    assert on["scores"] == pytest.approx(plain["scores"], abs=1e-6)
    before = load_file(tmp_path / "ann" / "adapter_model.safetensors")
    a, b = on["adapter"], plain["adapter"]
    moved = sum(float((b[k] - before[k]).norm() ** 2) for k in b) ** 0.5
    apart = sum(float((a[k] - b[k]).norm() ** 2) for k in b) ** 0.5
    assert moved > 0.1 and apart < 0.05 * moved, (moved, apart)


# --- Snakemake: the workflow object read by rules/common.smk ---------------------------------------


def test_the_workflow_object_has_what_the_rules_read():
    """rules/common.smk reads workflow.dryrun, output_settings.dryrun, is_main_process,
    resource_settings.cores, cores, local_exec, config_settings.overwrite_config (the
    configfiles and --config merged: set in ConfigSettings.__post_init__, no declared field) and
    configfiles (every config file read, checked for keys written twice: set in
    Workflow.__post_init__, appended to by the configfile directive, no declared field)."""
    import snakemake.api  # noqa: F401  (snakemake.workflow alone is a circular import)
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings
    from snakemake.workflow import Workflow

    for name in ("dryrun", "is_main_process", "cores", "local_exec"):
        assert isinstance(inspect.getattr_static(Workflow, name, None), property), name
    declared = {f.name for f in dataclasses.fields(Workflow)}
    assert {"output_settings", "config_settings", "resource_settings"} <= declared
    assert "dryrun" in {f.name for f in dataclasses.fields(OutputSettings)}
    assert "cores" in {f.name for f in dataclasses.fields(ResourceSettings)}
    assert ConfigSettings(config={"seed": 3}).overwrite_config == {"seed": 3}
    assert "self.configfiles = " in inspect.getsource(Workflow.__post_init__)
    assert "self.configfiles.append(" in inspect.getsource(Workflow.configfile)


# --- Snakemake: the engine's internals (each fast, so a new Snakemake fails here first) -----------


def test_snakemake_has_the_internals_the_engine_reads():
    """sparta.engine reads these Snakemake internals (docs/development/private-apis.md): the
    lock files its lock() writes, the lock writer and deleter, the persistence cache, the
    DAG's consumers of a job, and the IOFile and Rule calls behind the suffix output index."""
    import snakemake.api  # noqa: F401 (snakemake.dag imports back into the workflow: the API first)
    from snakemake.dag import DAG
    from snakemake.io import _IOFile
    from snakemake.persistence import PersistenceBase
    from snakemake.persistence.file import FilePersistence
    from snakemake.rules import Rule

    assert "self._lockfile" in inspect.getsource(FilePersistence), "FilePersistence._lockfile"
    for cls, name in [
        (FilePersistence, "_write_locks"),
        (FilePersistence, "_delete_locks"),
        (PersistenceBase, "_clear_cache"),
        (PersistenceBase, "cleanup_locks"),
        (Rule, "products"),
        (Rule, "is_producer"),
        (_IOFile, "constant_prefix"),
        (_IOFile, "constant_suffix"),
        (_IOFile, "match"),
    ]:
        assert callable(getattr(cls, name, None)), f"{cls.__name__}.{name}"
    assert "self.depending" in inspect.getsource(DAG.__init__), "DAG.depending"
    # sparta.slurm.first_attempts: the plan's jobs, local or not, their resources and rule
    from snakemake.jobs import Job

    assert callable(getattr(DAG, "needrun_jobs", None)), "DAG.needrun_jobs"
    for name in ("is_local", "resources"):
        assert isinstance(getattr(Job, name, None), property), f"Job.{name}"
    assert "rule" in Job.__slots__, "Job.rule"
    import snakemake.dag

    assert hasattr(snakemake.dag, "OutputIndex"), "snakemake.dag.OutputIndex (replaced by the suffix index)"
