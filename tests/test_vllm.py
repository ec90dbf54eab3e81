"""The vLLM backend against the Hugging Face backend, on a tiny model with a LoRA adapter.

Runs only where vLLM is importable and a CUDA GPU is present (vLLM is a GPU-only extra and
is never installed in CI); elsewhere it skips and says why."""

import json
import os

import pytest

from sparta.backends import open_backend
from sparta.backends.vllm import max_lora_rank
from sparta.chat import chat_ids
from sparta.judging import JudgeItem, judge_duels
from sparta.members import MemberSpec
from sparta.models import MemberLoader
from sparta.settings import BackendSettings, JudgeSettings, Runtime, Sampling, VLLMSettings

from .helpers import option_logprobs, served_model
from .test_hub import hf_home, offline  # noqa: F401 (fixtures)
from .tiny import build_tiny_model


def test_max_lora_rank_rounds_up_to_what_vllm_accepts(tmp_path):
    specs = []
    for name, r in (("a", 4), ("b", 12)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"r": r}))
        specs.append(MemberSpec(name, "base", str(folder)))
    assert max_lora_rank(specs) == 16
    assert max_lora_rank([MemberSpec("plain", "base")]) == 1


def _adapter(folder, **config):
    folder.mkdir(parents=True)
    base = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    (folder / "adapter_config.json").write_text(json.dumps({**base, **config}))
    return folder


def test_max_lora_rank_counts_the_rank_pattern(tmp_path):
    """vLLM sizes its LoRA slots by the largest rank of any module: r, or a rank_pattern
    override above it."""
    folder = _adapter(tmp_path / "a", r=8, rank_pattern={"v_proj": 48})
    assert max_lora_rank([MemberSpec("a", "base", str(folder))]) == 64


def test_what_vllm_cannot_serve_is_named_with_its_key():
    from sparta.modelfiles import vllm_lora_problems

    fine = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]}
    assert vllm_lora_problems(fine) == []
    assert vllm_lora_problems({**fine, "rank_pattern": {"q_proj": 64}}) == []
    cases = {
        "modules_to_save": {"modules_to_save": ["lm_head"]},
        "rank_pattern": {"rank_pattern": {"q_proj": 1024}},
        "use_dora": {"use_dora": True},
        "bias": {"bias": "lora_only"},
        "target_modules": {"target_modules": ["q_proj", "embed_tokens"]},
        "init_lora_weights": {"init_lora_weights": "pissa_niter_4"},
    }
    for key, change in cases.items():
        (problem,) = vllm_lora_problems({**fine, **change})
        assert problem.startswith(f"{key}:"), problem
    assert vllm_lora_problems({**fine, "r": 1024})[0].startswith("r: rank 1024")


def test_the_config_check_stops_an_adapter_vllm_cannot_serve(tmp_path):
    """Before any job: a member's adapter with modules_to_save, and one whose rank_pattern goes
    above vLLM's largest rank, each named with its member and key; the same adapters pass with
    backend hf, and a plain one passes with vllm."""
    from sparta.config import ConfigError
    from sparta.pool import adapter_folder_problems

    def weights(folder):
        import numpy as np
        from safetensors.numpy import save_file

        lora = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
        save_file({lora: np.zeros((8, 4), dtype=np.float32)}, str(folder / "adapter_model.safetensors"))
        return folder

    saved = weights(_adapter(tmp_path / "saved", modules_to_save=["lm_head"]))
    wide = weights(_adapter(tmp_path / "wide", rank_pattern={"o_proj": 768}))
    fine = weights(_adapter(tmp_path / "fine"))
    (problem,) = adapter_folder_problems(saved, "members[0] (ann).adapter", backend="vllm")
    assert "members[0] (ann).adapter" in problem and "modules_to_save" in problem and "backend: hf" in problem
    (problem,) = adapter_folder_problems(wide, "members[1] (bob).adapter", backend="vllm")
    assert "rank_pattern: rank 768" in problem and "512" in problem
    assert adapter_folder_problems(fine, "members[2].adapter", backend="vllm") == []
    assert adapter_folder_problems(saved, "members[0].adapter", backend="hf") == []
    assert issubclass(ConfigError, Exception)


def test_a_gpu_without_bf16_is_named_with_the_fix():
    from sparta.models import gpu_dtype_problem

    problem = gpu_dtype_problem("bfloat16", (7, 0), "Tesla V100-SXM2-32GB")
    assert "Tesla V100-SXM2-32GB" in problem and "capability 7.0" in problem
    assert "gpu_model" in problem and "SPARTA_SLURM_GPU_MODEL" in problem and "float16" in problem
    assert gpu_dtype_problem("bfloat16", (8, 0), "A100") is None
    assert gpu_dtype_problem("float16", (7, 5), "T4") is None
    assert gpu_dtype_problem("auto", (7, 0), "V100") is None  # auto picks float16 there


def test_vllm_starts_without_flashinfer_s_sampler_unless_told(monkeypatch):
    """The backend turns vLLM's FlashInfer sampler off before vLLM is imported (its warm-up
    compiles CUDA code with nvcc), and leaves a user's own setting alone."""
    from sparta.backends import vllm as backend

    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    try:
        backend._import_vllm(VLLMSettings(batch_invariant=True))
    except ImportError as e:  # no vLLM here: the message names the one fix
        assert "--software-deployment-method conda" in str(e) and "envs/vllm.yaml" in str(e)
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and os.environ["VLLM_BATCH_INVARIANT"] == "1"
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    try:
        backend._import_vllm(VLLMSettings())
    except ImportError:
        pass
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "1"


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="unknown backend"):
        open_backend(BackendSettings("tgi"), Runtime(device="cpu"))


@pytest.fixture(scope="module")
def gpu_member(tmp_path_factory):
    pytest.importorskip("vllm", reason="vLLM is not installed (GPU-only extra: pip install -e '.[vllm]')")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("vllm")
    base = build_tiny_model(root / "base", hidden=256)  # head_dim 64: every attention backend
    model = AutoModelForCausalLM.from_pretrained(base)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, lora).save_pretrained(root / "adapter")
    return MemberSpec("m", str(base), str(root / "adapter"))


def test_vllm_matches_hf_on_scores_and_generates(gpu_member):
    spec = gpu_member
    options = VLLMSettings(gpu_memory_utilization=0.3, enforce_eager=True, max_model_len=1024)
    backend = open_backend(BackendSettings("vllm", options), Runtime(0, "cuda", "float32"), [spec])
    vllm = backend.serve(spec)
    loader = MemberLoader("cuda", "float32")
    hf = served_model(loader.load(spec), loader.tokenizer(spec))
    items = [JudgeItem("What is 3 + 4?", "7"), JudgeItem("Tom has 5 apples.", "He has 7 apples now.")]
    got = judge_duels(vllm, items, JudgeSettings(batch_size=4), "sys")
    want = judge_duels(hf, items, JudgeSettings(batch_size=4), "sys")
    for g, w in zip(got, want):
        assert g.error is None and 1 <= g.score <= 10
        assert g.score == pytest.approx(w.score, abs=0.05)
    context, opts = "Q: What is 3 + 4? A:", [" 7", " 12", " seven apples"]
    assert option_logprobs(vllm, context, opts) == pytest.approx(option_logprobs(hf, context, opts), abs=0.05)
    texts = [chat_ids(vllm.tok, p, "sys") for p in ("What is 3 + 4?", "Tom has 5 apples.")]
    sampled = Sampling(temperature=1.0, max_new_tokens=8)
    first = vllm.generate(texts, sampled, [3, 4])
    assert first == vllm.generate(texts, sampled, [3, 4])  # per-request seeds: reproducible
    assert all(g.finish_reason in ("stop", "length") and g.n_tokens <= 8 for g in first)
    with pytest.raises(ValueError, match="one base model per job"):
        backend.serve(MemberSpec("other", "/elsewhere"))


def test_downloaded_adapters_are_checked_before_any_model_job(offline):  # noqa: F811 (the fixture)
    """Rule hub_download checks each downloaded adapter against the run's backend before it
    writes the manifest every model job waits for: a DoRA adapter stops a vllm run naming the
    id and the key; PEFT reads it (an hf run goes on); a config PEFT cannot read stops both."""
    import shutil

    from sparta import hub

    from .test_hub import ADAPTER, COMMITS, snapshot

    cache = offline / "hub"
    source = snapshot(cache, ADAPTER)
    ids = {}
    for name, change in (("dora", {"use_dora": True}), ("odd", {"peft_type": "NOT_A_PEFT_TYPE"})):
        repo = f"sparta-test/tiny-{name}"
        folder = snapshot(cache, repo, commit=COMMITS[ADAPTER])
        shutil.copytree(source, folder, dirs_exist_ok=True)
        config = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**config, **change}))
        ids[name] = f"hf://{repo}"
    rows = hub.download([f"hf://{ADAPTER}", ids["dora"]])
    (problem,) = hub.adapter_problems(rows, "vllm")
    assert problem.startswith(ids["dora"]) and "use_dora" in problem
    assert hub.adapter_problems(rows, "hf") == []
    (problem,) = hub.adapter_problems(hub.download([ids["odd"]]), "hf")
    assert ids["odd"] in problem and "PEFT" in problem
