"""Every trainer takes its precision from the run's dtype, set explicitly, never from a
library default (TRL's configs resolve an unset bf16 to bf16 autocast on any CPU)."""

import logging
import re

import pytest
import torch
import yaml
from trl import DPOConfig, SFTConfig

from sparta import config as sparta_config
from sparta.data import sft_examples
from sparta.members import MemberSpec
from sparta.models import cpu_features, pick_dtype
from sparta.settings import LoraSettings, Runtime, Settings, SFTSettings
from sparta.train import PrecisionError, common_trainer_args, sft_member, trainer_precision

from .tiny import build_tiny_model
from .workflow_helpers import REPO, run_snakemake, tiny_config, write_config

DEFAULT = yaml.safe_load((REPO / "config.yaml").read_text())

CPU = torch.device("cpu")
CUDA = torch.device("cuda")


def test_library_default_would_train_cpu_in_bf16(tmp_path):
    # the fault this guards against: TRL's own default on a CPU
    assert SFTConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is True


@pytest.mark.parametrize("config", [SFTConfig, DPOConfig])
def test_cpu_fp32_trainer_arguments(config, tmp_path):
    args = config(**common_trainer_args(CPU, torch.float32, 3, tmp_path), gradient_checkpointing=False)
    assert (args.bf16, args.fp16, args.use_cpu) == (False, False, True)
    assert args.dataloader_pin_memory is False and args.average_tokens_across_devices is False
    assert (args.seed, args.data_seed, args.logging_steps) == (3, 3, 1)


def test_auto_is_fp32_on_cpu():
    assert pick_dtype("auto", CPU) == torch.float32


def test_cuda_like_settings(monkeypatch):
    """bf16 where the GPU computes it (compute capability 8.0 and up), whatever PyTorch's
    is_bf16_supported says (it counts emulation on older GPUs)."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert pick_dtype("auto", CUDA) == torch.bfloat16 == pick_dtype("bfloat16", CUDA)
    bf16 = trainer_precision(CUDA, torch.bfloat16)
    assert (bf16["bf16"], bf16["fp16"], bf16["use_cpu"], bf16["dataloader_pin_memory"]) == (
        True,
        False,
        False,
        True,
    )
    fp16 = trainer_precision(CUDA, torch.float16)
    assert (fp16["bf16"], fp16["fp16"]) == (False, True)
    assert trainer_precision(CUDA, torch.float32)["bf16"] is False
    # a GPU without bf16 (V100, T4): auto falls back to fp16, and bf16 asked stops the job
    # naming the GPU and the fixes, though PyTorch calls bf16 supported there (emulated)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 0))
    assert pick_dtype("auto", CUDA) == torch.float16
    with pytest.raises(RuntimeError, match=r"Tesla V100-SXM2-32GB \(capability 7.0") as e:
        pick_dtype("bfloat16", CUDA)
    assert "SPARTA_SLURM_GPU_MODEL" in str(e.value)
    with pytest.raises(PrecisionError, match="bf16"):
        trainer_precision(CUDA, torch.bfloat16)


def test_fp16_on_cpu_is_an_error_naming_the_fix():
    with pytest.raises(PrecisionError) as e:
        trainer_precision(CPU, torch.float16)
    assert "float32" in e.value.hint


def test_cpu_bf16_follows_native_support(monkeypatch):
    import sparta.models as models

    feats = cpu_features()
    assert feats["capability"] and isinstance(feats["native_bf16"], bool)
    monkeypatch.setattr(models, "cpu_features", lambda: {**feats, "native_bf16": False})
    with pytest.raises(PrecisionError, match="no native bf16"):
        trainer_precision(CPU, torch.bfloat16)
    monkeypatch.setattr(models, "cpu_features", lambda: {**feats, "native_bf16": True})
    assert trainer_precision(CPU, torch.bfloat16)["bf16"] is True


def test_run_asking_emulated_bf16_stops_before_any_job(monkeypatch):
    import sparta.models as models

    feats = cpu_features()
    monkeypatch.setattr(models, "cpu_features", lambda: {**feats, "native_bf16": False})
    s = Settings.from_config({**DEFAULT, "device": "cpu", "dtype": "bfloat16"})
    with pytest.raises(sparta_config.ConfigError, match="dtype: bfloat16.*float32"):
        sparta_config.check_local_device(s)


def test_sft_trains_without_autocast_and_logs_progress(tmp_path, caplog, monkeypatch):
    """The SFT of a CPU run computes in fp32 (no autocast context around the forward) and
    its progress reaches the job log while it trains."""
    base = build_tiny_model(tmp_path / "base")
    seen = []
    from transformers import PreTrainedModel

    real_forward = type(torch.nn.Module()).__call__

    def spy(self, *a, **k):
        if isinstance(self, PreTrainedModel) and self.training:
            seen.append(torch.is_autocast_enabled("cpu"))
        return real_forward(self, *a, **k)

    monkeypatch.setattr(torch.nn.Module, "__call__", spy)
    with caplog.at_level(logging.INFO, logger="sparta.train"):
        sft_member(
            MemberSpec("ann", str(base)),
            sft_examples("addition", 8, 0),
            tmp_path / "ann",
            SFTSettings(max_steps=3, batch_size=4),
            LoraSettings(),
            Runtime(seed=0, device="cpu", system_prompt=None),
        )
    assert seen and not any(seen)
    assert "SFT ann: step 3/3 loss" in caplog.text


def _threads_by_rule(dry_run_output: str) -> dict[str, set[int]]:
    """rule -> the thread counts of its jobs in a dry run (a job without a threads line: 1)."""
    out: dict[str, set[int]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            t = re.search(r"^\s+threads: (\d+)", block, flags=re.M)
            out.setdefault(m.group(1), set()).add(int(t.group(1)) if t else 1)
    return out


def test_local_cpu_jobs_fill_the_cores(tmp_path, tiny_base):
    """On 2 CPU cores: a job serving the pool takes both (one run) or one (two runs side by
    side), a job of one member one thread (two run side by side), trainers included, whatever
    resources.<stage>.gpu says (a cluster's)."""
    cfg = write_config(tmp_path, tiny_config(tiny_base, dpo_fanout="member"))
    proc = run_snakemake(tmp_path / "work", cfg, "-n", cores=2)
    threads = _threads_by_rule(proc.stdout + proc.stderr)
    assert threads["sft_member"] == {1} and threads["dpo"] == {1}
    assert threads["combat"] == {2} and threads["judge"] == {2}
    # a study of two runs: their pool jobs run side by side, one thread each
    study = tiny_config(tiny_base, dpo_fanout="member")
    study["study"] = {"seeds": [1], "experiments": {"a": {}, "b": {"dpo": {"learning_rate": 1.0e-4}}}}
    proc = run_snakemake(tmp_path / "study", write_config(tmp_path / "s", study), "-n", cores=2)
    threads = _threads_by_rule(proc.stdout + proc.stderr)
    assert threads["combat"] == threads["judge"] == threads["evaluate_member"] == {1}, threads
