"""The vLLM backend against the Hugging Face backend, on a tiny model with a LoRA adapter.

Runs only where vLLM is importable and a CUDA GPU is present (vLLM is a GPU-only extra and
is never installed in CI); elsewhere it skips and says why."""

import json

import pytest

from sparta.backends import open_backend
from sparta.backends.vllm import max_lora_rank
from sparta.chat import chat_ids
from sparta.judging import JudgeItem, judge_duels
from sparta.members import MemberSpec
from sparta.models import MemberLoader
from sparta.settings import BackendSettings, JudgeSettings, Runtime, Sampling, VLLMSettings

from .helpers import option_logprobs, served_model
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
