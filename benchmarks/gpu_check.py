"""GPU check: the model stages on CUDA with a tiny model, in well under 5 minutes.

    python benchmarks/gpu_check.py [--out figures.json]

Covers, each timed, with tokens/s and peak GPU memory printed:
  1. Hugging Face backend: batched sampled generation (combat) on CUDA;
  2. Hugging Face backend: expected-score judging on CUDA;
  3. 2 DPO steps on CUDA (TRL, LoRA member, frozen reference adapter);
  4. vLLM backend, if vllm is importable: the same generation and judging with the member
     as a LoRARequest, and its scores against the Hugging Face backend's.
Exits non-zero if CUDA is missing or a stage fails; prints one line per figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "workflow"))


def peak_mb(torch) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0


def sync(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the figures as JSON here")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda", help="cuda (the check); cpu runs it as a smoke test")
    args = parser.parse_args()

    import pandas as pd
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from sparta.backends import open_backend
    from sparta.chat import chat_ids
    from sparta.judging import JudgeItem, judge_duels
    from sparta.members import MemberSpec
    from sparta.models import MemberLoader
    from sparta.settings import (
        BackendSettings,
        DPOSettings,
        JudgeSettings,
        LoraSettings,
        Runtime,
        Sampling,
        VLLMSettings,
    )
    from tests.helpers import dpo_member, served_model
    from tests.tiny import build_tiny_model

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (--device cpu for a smoke test)")
        return 2
    dev, dtype = args.device, "bfloat16" if args.device == "cuda" else "float32"
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    figures: dict[str, object] = {"device": name, "torch": torch.__version__}
    print(f"device: {figures['device']}  torch {torch.__version__}")
    tmp = Path(tempfile.mkdtemp(prefix="sparta-gpu-"))
    base = build_tiny_model(tmp / "base", layers=4, hidden=256)
    lora = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(tmp / "adapter")
    spec = MemberSpec("m", str(base), str(tmp / "adapter"))

    questions = [f"What is {i} + {i + 3}? Tom has {i} apples." for i in range(args.prompts)]
    sampling = Sampling(temperature=1.0, max_new_tokens=args.new_tokens)

    judge_items: list = []

    def run_stage(name, served, dtype_note):
        texts = [chat_ids(served.tok, q, "You are a helpful AI assistant.") for q in questions]
        sync(torch)
        t0 = time.perf_counter()
        outs = served.generate(texts, sampling, list(range(len(texts))), batch_size=32)
        sync(torch)
        dt = time.perf_counter() - t0
        n = sum(o.n_tokens for o in outs)
        figures[f"{name}_generate_tokens_per_s"] = round(n / dt, 1)
        rate = n / dt
        print(
            f"{name} generate: {len(outs)} prompts, {n} tokens in {dt:.2f} s = {rate:.0f} tokens/s "
            f"({dtype_note})"
        )
        if not judge_items:  # every backend judges the same (first backend's) answers, as duels
            judge_items.extend(JudgeItem(q, o.text) for q, o in zip(questions, outs))
            if len(judge_items) % 2:
                judge_items.pop()
        t0 = time.perf_counter()
        judged = judge_duels(
            served, judge_items, JudgeSettings(batch_size=16), "You are a helpful AI assistant."
        )
        sync(torch)
        dt = time.perf_counter() - t0
        bad = sum(j.score is None for j in judged)
        figures[f"{name}_judgments_per_s"] = round(len(judged) / dt, 1)
        print(
            f"{name} expected-score judging: {len(judged)} judgments in {dt:.2f} s "
            f"= {len(judged) / dt:.1f}/s, {bad} without a score"
        )
        return judged

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    loader = MemberLoader(dev, dtype)
    hf = served_model(loader.load(spec), loader.tokenizer(spec))
    hf_judged = run_stage("hf", hf, dtype)
    figures["hf_peak_gpu_mb"] = round(peak_mb(torch), 1)
    print(f"hf peak GPU memory: {figures['hf_peak_gpu_mb']:.0f} MB")
    del hf, loader
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    prefs = pd.DataFrame({"prompt": questions[:2], "chosen": ["7", "9"], "rejected": ["six", "ten"]})
    t0 = time.perf_counter()
    dpo = DPOSettings(learning_rate=1e-4, max_length=128)
    runtime = Runtime(seed=0, device=dev, dtype=dtype, system_prompt=None)
    summary = dpo_member(spec, prefs, tmp / "dpo", dpo, LoraSettings(), runtime, seed=0)
    dt = time.perf_counter() - t0
    assert summary["steps"] == 2, summary
    figures.update(
        dpo_steps=summary["steps"], dpo_seconds=round(dt, 2), dpo_peak_gpu_mb=round(peak_mb(torch), 1)
    )
    print(
        f"dpo: {summary['steps']} steps in {dt:.2f} s, loss {summary['train_loss']:.4f}, "
        f"peak GPU memory {figures['dpo_peak_gpu_mb']:.0f} MB"
    )

    vllm_installed = importlib.util.find_spec("vllm") is not None
    if vllm_installed and dev == "cuda":
        torch.cuda.empty_cache()
        options = VLLMSettings(gpu_memory_utilization=0.3, max_model_len=1024)
        t0 = time.perf_counter()
        backend = open_backend(BackendSettings("vllm", options), Runtime(0, "cuda", "bfloat16"), [spec])
        served = backend.serve(spec)
        figures["vllm_start_seconds"] = round(time.perf_counter() - t0, 1)
        print(f"vllm engine start: {figures['vllm_start_seconds']} s")
        vllm_judged = run_stage("vllm", served, "bf16, LoRARequest")
        diff = max(abs(a.score - b.score) for a, b in zip(hf_judged, vllm_judged) if a.score and b.score)
        figures["vllm_vs_hf_max_score_diff"] = round(diff, 4)
        free, total = torch.cuda.mem_get_info()
        figures["vllm_gpu_mb_in_use"] = round((total - free) / 2**20, 1)
        print(
            f"vllm GPU memory in use: {figures['vllm_gpu_mb_in_use']:.0f} MB; "
            f"same judgments as hf: max |hf - vllm| score {diff:.3f}"
        )
    else:
        figures["vllm"] = "not installed" if not vllm_installed else "skipped on cpu"
        print(f"vllm: {figures['vllm']}")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
