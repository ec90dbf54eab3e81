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
