"""GPU check: the model stages on CUDA with a tiny model, in well under 5 minutes; then,
if asked, the same stages at real models' shapes and the whole embedded default workflow.

    python benchmarks/gpu_check.py [--out figures.json] [--parts all] [--budget 420]
        [--shapes smollm2-135m,qwen2.5-7b --tokenizer MODEL_FOLDER] [--workflow]
    python benchmarks/gpu_check.py --smoke  # every part at tiny size on the CPU (CI)

Covers, each timed, with tokens/s and peak GPU memory printed:
  1. Hugging Face backend: batched sampled generation (combat) on CUDA;
  2. Hugging Face backend: expected-score judging on CUDA;
  3. 2 DPO steps on CUDA (TRL, LoRA member, frozen reference adapter);
  4. vLLM backend, if vllm is importable: the same generation and judging with the member
     as a LoRARequest, and its scores against the Hugging Face backend's.
  5. ``--shapes``: steps 1-3 at a real model's shape with random weights (no download: the
     tokenizer folder's own config for ``smollm2-135m``, the embedded default's base;
     Qwen2.5-7B-Instruct's layers, the paper's base, with that tokenizer's vocabulary for
     ``qwen2.5-7b``): the base saved and loaded as a job loads it, two members' LoRA
     adapters (the project's LoRA settings) answering in the same batches, pointwise
     expected-score judging with the default defences, DPO steps at the paper's batch of 1.
     Random weights seldom end an answer, so answers run to about ``max_new_tokens``: the
     figures bound a real model's (which stops earlier) from above.
  6. ``--workflow``: the embedded default (``config.yaml``: 4 members, SFT, 2 iterations,
     evaluation) run by snakemake on this GPU with a random-weight base of SmolLM2-135M's shape
     (from ``--tokenizer``), wall time and each rule's job times from its benchmark files.
  7. ``--parts``, each time-boxed (:data:`PART_BUDGETS`: skipped with the reason when less of
     ``--budget`` is left, stopped when it runs past its own; one that fails records its error
     and the next runs), saved under ``parts`` in the JSON after each: ``machine`` (GPU,
     capability, library versions, date); ``steps`` (bench_step.py's counts on this device:
     ATen ops and tensors built from Python data per decoding step and scoring forward, 8 and
     128 rows, 1 and 4 adapters); ``decode`` (the Hugging Face backend's sampled decoding,
     tokens/s and ms per step from two calls' difference, and peak GPU memory, at SmolLM2-135M's
     and Qwen2.5-7B's configs with their own vocabularies, random weights, two adapters mixed);
     ``dpo`` (one DPO job at the 7B shape with a member's LoRA adapter, max length 512, timed by
     bench_dpo.py's breakdown: ms per step and the model's share, peak GPU memory); ``tiny``
     (steps 1-4). These need no model folder: a tiny test tokenizer stands in (token ids only).
     On a CPU every part runs at tiny size, a smoke test.
Exits non-zero if CUDA is missing or a stage or part fails; prints one line per figure.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "benchmarks"))  # bench_step, bench_dpo: the parts reuse them


def peak_mb(torch) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0


def sync(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# Layers of the paper's base (Qwen2.5-7B-Instruct's config.json); the vocabulary is the given
# tokenizer's, so the embedding and output layers are smaller than the real 152k.
SHAPES = {
    "smollm2-135m": None,  # the tokenizer folder's own config: the embedded default's base
    "qwen2.5-7b": dict(
        model_type="qwen2",
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=False,
    ),
}
# per shape: prompts, answer tokens, DPO pairs, DPO max length
SHAPE_SIZES = {"smollm2-135m": (128, 128, 8, 512), "qwen2.5-7b": (64, 256, 8, 512)}

# The parts' shapes: whole configs with their own vocabularies (SmolLM2-135M's config.json;
# Qwen2.5-7B-Instruct's layers above and its 152,064 tokens), so no model folder is needed
PART_LAYOUTS = {
    "smollm2-135m": dict(
        model_type="llama",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(SHAPES["qwen2.5-7b"], vocab_size=152064),
}
# the same layouts at tiny size, for the smoke test on a CPU
TINY_LAYOUT = dict(
    vocab_size=1024,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
# seconds each part may take on a GPU (in the order they run); on a CPU only --budget applies
PART_BUDGETS = {"machine": 15, "steps": 90, "decode": 150, "dpo": 150, "tiny": 45}
# decode: rows and the new tokens of the short and the long call, per shape (GPU; CPU: 4, 2, 8)
DECODE_SIZES = {"smollm2-135m": (128, 8, 72), "qwen2.5-7b": (64, 8, 72)}
DPO_SHAPE, DPO_PAIRS, DPO_MAX_LENGTH = "qwen2.5-7b", 8, 512  # CPU: 2 pairs, max length 128
SYSTEM = "You are a helpful AI assistant."


def default_tokenizer_folder() -> Path:
    return REPO / "results" / "_bases" / "smollm2"


def random_base(
    shape: str,
    tok_folder: Path,
    folder: Path,
    device: str,
    dtype,
    keep: bool = False,
    layers: int | None = None,
    layout: dict | None = None,
):
    """A base model folder of ``shape`` with random weights and ``tok_folder``'s tokenizer:
    (folder, parameters, the model in memory if ``keep``). ``layout``: the config's fields
    instead of :data:`SHAPES`'s (its ``vocab_size``, if any, instead of the tokenizer's)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_folder)
    fewer = {"num_hidden_layers": layers} if layers else {}  # a smoke test's shortcut
    layout = SHAPES[shape] if layout is None else layout
    if layout is None:
        cfg = AutoConfig.from_pretrained(tok_folder, **fewer)
    else:
        kw = {**layout, **fewer}
        vocab = kw.pop("vocab_size", len(tok))
        cfg = AutoConfig.for_model(kw.pop("model_type"), vocab_size=vocab, **kw)
        cfg.bos_token_id, cfg.eos_token_id = tok.bos_token_id, tok.eos_token_id
        cfg.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, n, model if keep else None


def shape_stage(
    shape: str,
    tok_folder: Path,
    work: Path,
    dev: str,
    dtype: str,
    figures: dict,
    scale: float = 1.0,
    layers: int | None = None,
) -> None:
    """Combat generation, expected-score judging and DPO steps at ``shape`` (random weights)."""
    import gc

    import pandas as pd
    import torch
    from peft import get_peft_model

    from sparta.backends import open_backend
    from sparta.chat import chat_ids
    from sparta.judging import JudgeItem, judge_duels
    from sparta.members import MemberSpec
    from sparta.settings import BackendSettings, DPOSettings, JudgeSettings, LoraSettings, Runtime, Sampling
    from sparta.train import dpo_members, lora_config

    n_prompts, new_tokens, n_pairs, max_length = SHAPE_SIZES[shape]
    n_prompts, new_tokens = max(4, int(n_prompts * scale)), max(4, int(new_tokens * scale))
    n_pairs = min(n_pairs, n_prompts // 2)
    key = shape.replace(".", "_").replace("-", "_")
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    sync(torch)
    t0 = time.perf_counter()
    base, n_params, model = random_base(
        shape, tok_folder, work / f"{shape}-base", dev, torch_dtype, keep=True, layers=layers
    )
    sync(torch)
    figures[f"{key}_params_m"] = round(n_params / 1e6, 1)
    figures[f"{key}_build_and_save_s"] = round(time.perf_counter() - t0, 1)
    # two members' adapters (the project's LoRA settings), saved as SFT or DPO saves them
    specs = []
    for name in ("a", "b"):
        peft = get_peft_model(model, lora_config(LoraSettings()))
        peft.save_pretrained(work / f"{shape}-{name}")
        model = peft.unload()
        specs.append(MemberSpec(name, str(base), str(work / f"{shape}-{name}")))
    del model, peft
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    runtime = Runtime(seed=0, device=dev, dtype=dtype, system_prompt="You are a helpful AI assistant.")
    sync(torch)
    t0 = time.perf_counter()
    backend = open_backend(BackendSettings("hf"), runtime, specs)
    served = backend.serve_each([specs[i % 2] for i in range(n_prompts)])
    warm = [chat_ids(served.tok, "Hello.", runtime.system_prompt)] * 2  # loads the base and adapters
    backend.serve_each(specs).generate(warm, Sampling(max_new_tokens=2), [0, 1], batch_size=2)
    sync(torch)
    figures[f"{key}_load_s"] = round(time.perf_counter() - t0, 1)
    questions = [
        f"Question {i}: a train leaves at {i % 12 + 1} pm at {40 + i} km/h; another follows an hour "
        f"later at {60 + i} km/h. When does the second catch up? Explain your reasoning step by step."
        for i in range(n_prompts)
    ]
    prompts = [chat_ids(served.tok, q, runtime.system_prompt) for q in questions]
    sampling = Sampling(temperature=0.7, top_p=0.95, top_k=50, max_new_tokens=new_tokens)
    sync(torch)
    t0 = time.perf_counter()
    outs = served.generate(prompts, sampling, list(range(n_prompts)), batch_size=n_prompts, desc="combat")
    sync(torch)
    dt = time.perf_counter() - t0
    n_tok = sum(o.n_tokens for o in outs)
    figures[f"{key}_generate_tokens_per_s"] = round(n_tok / dt, 1)
    figures[f"{key}_generate_s"] = round(dt, 2)
    print(
        f"{shape}: {n_params / 1e6:.0f}M parameters; combat of 2 adapters in one batch: {n_prompts} "
        f"prompts x {new_tokens} tokens, {n_tok} tokens in {dt:.2f} s = {n_tok / dt:.0f} tokens/s",
        flush=True,
    )
    items = [JudgeItem(q, o.text) for q, o in zip(questions, outs)]
    judge = backend.serve_each([specs[(i // 2 + 1) % 2] for i in range(len(items))])
    cfg = JudgeSettings(max_length=1024)
    sync(torch)
    t0 = time.perf_counter()
    judged = judge_duels(judge, items, cfg, runtime.system_prompt, seeds=list(range(len(items))))
    sync(torch)
    dt = time.perf_counter() - t0
    bad = sum(j.score is None for j in judged)
    figures[f"{key}_judgments_per_s"] = round(len(judged) / dt, 1)
    figures[f"{key}_serve_peak_gpu_mb"] = round(peak_mb(torch), 1)
    print(
        f"{shape}: expected-score judging (pointwise, default defences, batch {cfg.batch_size}): "
        f"{len(judged)} judgments in {dt:.2f} s = {len(judged) / dt:.1f}/s, {bad} without a score; "
        f"peak GPU memory {figures[f'{key}_serve_peak_gpu_mb']:.0f} MB",
        flush=True,
    )
    del backend, served, judge
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    prefs = pd.DataFrame(
        {
            "prompt": questions[:n_pairs],
            "chosen": [o.text for o in outs[:n_pairs]],
            "rejected": [o.text for o in outs[n_pairs : 2 * n_pairs]],
        }
    )
    dpo = DPOSettings(learning_rate=1e-6, max_length=max_length)
    sync(torch)
    t0 = time.perf_counter()
    (summary,) = dpo_members([(specs[0], work / f"{shape}-dpo", 0)], prefs, dpo, LoraSettings(), runtime)
    sync(torch)
    dt = time.perf_counter() - t0
    figures[f"{key}_dpo_steps"] = summary["steps"]
    figures[f"{key}_dpo_job_s"] = round(dt, 1)
    figures[f"{key}_dpo_peak_gpu_mb"] = round(peak_mb(torch), 1)
    print(
        f"{shape}: DPO of one member, {summary['steps']} steps (batch 1, max length {max_length}, "
        f"gradient checkpointing {dpo.gradient_checkpointing}): {dt:.1f} s with the base load and "
        f"reference log-probabilities; peak GPU memory {figures[f'{key}_dpo_peak_gpu_mb']:.0f} MB",
        flush=True,
    )
    shutil.rmtree(base, ignore_errors=True)


def workflow_stage(
    tok_folder: Path, work: Path, dev: str, cores: int, figures: dict, overlay: Path | None = None
) -> None:
    """The embedded default on this device with a random-weight SmolLM2-135M-shaped base
    (``overlay``: a config merged over it, e.g. .test/config.yaml for a smoke test)."""
    import pandas as pd
    import torch
    import yaml

    from sparta.study import merge

    base, _, _ = random_base("smollm2-135m", tok_folder, work / "smollm2-random", dev, torch.float32)
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    if overlay is not None:
        cfg = merge(cfg, yaml.safe_load(overlay.read_text()))
    cfg.update(experiment="gpu-default", device=dev)
    # no sentence-embedding wheel on a bare GPU node
    cfg["analysis"] = {**cfg.get("analysis", {}), "embedding_package": None}
    cfg["base_models"] = {"smollm2": {"path": str(base)}}
    cfg["prompts"]["file"] = str(REPO / cfg["prompts"]["file"])
    cfg["sft"]["data_dir"] = str(REPO / cfg["sft"]["data_dir"])
    config = work / "gpu-default.yaml"
    config.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work / "run")]
    cmd += ["--configfile", str(config), "--cores", str(cores), "--scheduler", "greedy"]
    t0 = time.perf_counter()
    env = dict(os.environ)  # the sparta package from this checkout, installed or not
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "workflow"), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    (work / "workflow.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    rows = []
    for tsv in sorted((work / "run" / "results" / "gpu-default").rglob("benchmarks/**/*.tsv")):
        b = pd.read_csv(tsv, sep="\t")
        name = tsv.stem.rsplit(".", 1)[0]
        rule = "sft" if name.startswith("init_") else name.rsplit("_", 1)[0] if "_" in name else name
        rule = "pair_accuracy" if rule.startswith("pair_accuracy") else rule
        rows.append({"rule": rule, "job": str(tsv.relative_to(work / "run")), "s": float(b["s"].iloc[0])})
    jobs = pd.DataFrame(rows)
    figures["workflow_wall_s"] = round(wall, 1)
    done = re.findall(r"(\d+) of (\d+) steps", proc.stdout + proc.stderr)
    figures["workflow_steps"] = "/".join(done[-1]) if done else "?"
    figures["workflow_jobs_timed"] = len(jobs)
    print(f"workflow (the embedded default on {dev}, random SmolLM2-135M-shaped base): {wall:.1f} s wall")
    if len(jobs):
        per = jobs.groupby("rule")["s"].agg(["count", "min", "max", "sum"]).round(1)
        figures["workflow_job_s"] = {
            r: {"jobs": int(row["count"]), "min": row["min"], "max": row["max"], "sum": row["sum"]}
            for r, row in per.iterrows()
        }
        print(per.to_string())


def tiny_stage(args, figures: dict, dev: str, dtype: str, tmp: Path) -> None:
    """Steps 1-4: a tiny random model through every model stage."""
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


class PartTimeout(BaseException):
    """A part ran past its budget (a BaseException, so no ``except Exception`` inside a
    library swallows it)."""


@contextmanager
def time_box(seconds: float):
    """Raise :class:`PartTimeout` in this (the main) thread once ``seconds`` have passed: Python
    code is stopped between two operations, a CUDA call or a file write when it returns."""

    def expire(signum, frame):
        raise PartTimeout(f"ran past its budget of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def free_memory() -> None:
    """Drop what the last part left and start GPU memory's peak afresh."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run_part(parts: dict, name: str, fn, budget: float | None, deadline: float) -> bool:
    """``fn()`` (the part's figures, a dict) within ``budget`` seconds (None: what is left),
    recorded under ``parts[name]`` with its status: done, skipped (less than ``budget`` left
    before ``deadline``, a ``time.monotonic()`` reading) or failed (its error). False if it
    failed."""
    left = deadline - time.monotonic()
    budget = left if budget is None else budget
    if left < budget or left <= 0:
        reason = f"needs up to {budget:.0f} s, {max(left, 0):.0f} s of --budget left"
        parts[name] = {"status": "skipped", "reason": reason, "budget_s": round(budget)}
        print(f"{name}: skipped, {reason}", flush=True)
        return True
    start = time.monotonic()
    try:
        with time_box(budget):
            got = fn()
        status = "failed" if got.get("failed") else "done"
        parts[name] = {"status": status, **got}
    except (Exception, PartTimeout) as e:  # noqa: BLE001 -- record it, go on with the next part
        trace = traceback.format_exc()
        parts[name] = {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": trace[-3000:]}
        print(f"{name}: FAILED {type(e).__name__}: {e}\n{trace}", flush=True)
    parts[name].update(seconds=round(time.monotonic() - start, 1), budget_s=round(budget))
    free_memory()
    return parts[name]["status"] != "failed"


@dataclass
class PartRun:
    """What the parts share: the device, its dtype, a scratch folder, and the random bases built
    so far (shape -> base folder, adapter folder, parameters)."""

    dev: str
    dtype: str  # bfloat16 on a GPU, float32 on a CPU
    work: Path
    bases: dict = field(default_factory=dict)

    @property
    def small(self) -> bool:  # a CPU runs the parts as a smoke test, at tiny size
        return self.dev == "cpu"

    def tokenizer(self) -> Path:
        """A tiny test tokenizer with a chat template: the parts feed token ids, and a random
        model's answers need no real vocabulary."""
        from tests.tiny import build_tiny_model

        return build_tiny_model(self.work / "tokenizer", layers=1, hidden=16)


def part_layout(shape: str, small: bool) -> dict:
    layout = dict(PART_LAYOUTS[shape])
    if small:
        layout.update(TINY_LAYOUT, **({"head_dim": 16} if "head_dim" in layout else {}))
    return layout


def part_base(run: PartRun, shape: str, keep: bool):
    """((base folder, adapter folder, parameters), the model with adapters ``default`` and
    ``b`` if ``keep``): a random base of ``shape`` saved with one member's LoRA adapter (the
    project's settings), built once per run unless the model is wanted."""
    import torch
    from peft import get_peft_model

    from sparta.settings import LoraSettings
    from sparta.train import lora_config

    if shape in run.bases and not keep:
        return run.bases[shape], None
    folder = run.work / f"part-{shape}"
    dtype = torch.bfloat16 if run.dtype == "bfloat16" else torch.float32
    layout = part_layout(shape, run.small)
    base, n, model = random_base(shape, run.tokenizer(), folder / "base", run.dev, dtype, True, layout=layout)
    peft = get_peft_model(model, lora_config(LoraSettings()))
    peft.save_pretrained(folder / "adapter")
    run.bases[shape] = (base, folder / "adapter", n)
    if not keep:
        return run.bases[shape], None
    peft.add_adapter("b", lora_config(LoraSettings()))
    return run.bases[shape], peft.eval()


def machine_part(run: PartRun) -> dict:
    """(d) The machine: GPU, capability, driver, library versions, date."""
    import datetime
    import platform

    import torch

    def version(package: str) -> str | None:  # what imports here (carried wheels come first)
        try:
            return importlib.import_module(package).__version__
        except Exception as e:  # noqa: BLE001
            return None if isinstance(e, ModuleNotFoundError) else f"import failed: {type(e).__name__}: {e}"

    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        **{p: version(p) for p in ("transformers", "peft", "trl", "accelerate", "datasets")},
        "gpu": None,
    }
    if run.dev == "cuda":
        props = torch.cuda.get_device_properties(0)
        out.update(gpu=props.name, capability=f"{props.major}.{props.minor}")
        out.update(gpu_memory_mib=round(props.total_memory / 2**20), driver=nvidia_driver())
    print(
        f"machine: {out['gpu'] or 'no GPU'} (capability {out.get('capability', '-')}), torch {out['torch']}, "
        f"transformers {out['transformers']}, peft {out['peft']}, trl {out['trl']}; {out['date']}",
        flush=True,
    )
    return out


def nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else None


def steps_part(run: PartRun) -> dict:
    """(a) bench_step.py's counts on this device: per decoding step (greedy and sampled) and
    per scoring forward, ATen ops and tensors built from Python data, and which grow with rows."""
    from types import SimpleNamespace

    import bench_step

    rows, adapters = ((2, 4), (1, 2)) if run.small else ((8, 128), (1, 4))
    (run.work / "steps").mkdir(exist_ok=True)
    backend, specs, model = bench_step.pool(run.work / "steps", max(adapters))
    model.to(run.dev)  # its pool is built on the CPU; the counts are the host's work per step
    args = SimpleNamespace(rows=list(rows), adapters=list(adapters), steps=[2, 6])
    table = bench_step.measure(args, backend, specs, model)
    layers = bench_step.lora_layers(model)
    bench_step.report(table, layers)
    counts = {
        f"{r} rows, {a} adapters": {w: {k: round(v, 1) for k, v in got[w].items()} for w in got}
        for (r, a), got in table.items()
    }
    grows = {
        f"{a} adapters": [
            f"{w} {k}"
            for w, k in bench_step.COLUMNS
            if table[rows[-1], a][w][k] > table[rows[0], a][w][k] + 0.5
        ]
        for a in adapters
    }
    model_note = "bench_step.py's tiny Llama (2 layers, hidden 16), fp32, random LoRA adapters"
    return {
        "model": model_note,
        "lora_layers": layers,
        "counts": counts,
        f"grows {rows[0]} -> {rows[-1]} rows": grows,
    }


def decode_part(run: PartRun) -> dict:
    """(b) The Hugging Face backend's decoding at each of :data:`PART_LAYOUTS` (one failing
    shape is recorded and the next still runs)."""
    out: dict = {}
    for shape in PART_LAYOUTS:
        try:
            out[shape] = decode_shape(run, shape)
        except Exception as e:  # noqa: BLE001
            out[shape] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            out.setdefault("failed", []).append(shape)
            print(f"decode {shape}: FAILED {type(e).__name__}: {e}", flush=True)
        free_memory()
    return out


def decode_shape(run: PartRun, shape: str) -> dict:
    """Sampled decoding (combat's sampling) of rows of two adapters in one batch, no row
    stopping: tokens/s of a decoding step from a short and a long call's difference (prefill
    and set-up cancel out; the faster of two calls each), of the long call whole, and peak GPU
    memory (the model included)."""
    import torch

    from sparta.backends import hf
    from sparta.models import load_tokenizer
    from sparta.settings import Sampling

    rows, short, long = (4, 2, 8) if run.small else DECODE_SIZES[shape]
    (base, _, n_params), model = part_base(run, shape, keep=True)
    tok = load_tokenizer(base)
    names = [("default", "b")[i % 2] for i in range(rows)]
    prompts = [[3 + (11 * i + 7 * j) % 300 for j in range(48 + i % 16)] for i in range(rows)]

    def timed(n: int) -> float:
        sampling = Sampling(temperature=0.7, top_p=0.95, top_k=50, max_new_tokens=n)
        sync(torch)
        start = time.perf_counter()
        seeds, desc = list(range(rows)), f"decode {shape}"
        outs = hf.generate(
            model, tok, prompts, sampling, seeds, batch_size=rows, desc=desc, adapter_names=names
        )
        sync(torch)
        assert sum(o.n_tokens for o in outs) == rows * n, "a row stopped early"
        return time.perf_counter() - start

    stops, hf.stop_token_ids = hf.stop_token_ids, lambda tok: []  # no row ends: every step is full
    try:
        timed(2)  # warm-up
        t_short, t_long = min(timed(short), timed(short)), min(timed(long), timed(long))
    finally:
        hf.stop_token_ids = stops
    step = (t_long - t_short) / (long - short)
    got = {
        "params_m": round(n_params / 1e6, 1),
        "dtype": run.dtype,
        "rows": rows,
        "adapters": 2,
        "prompt_tokens_mean": round(sum(map(len, prompts)) / rows, 1),
        "new_tokens": [short, long],
        "call_s": [round(t_short, 3), round(t_long, 3)],
        "ms_per_step": round(1000 * step, 2),
        "decode_tokens_per_s": round(rows / step, 1),
        "call_tokens_per_s": round(rows * long / t_long, 1),
        "peak_gpu_mb": round(peak_mb(torch), 1),
    }
    print(
        f"decode {shape}: {got['params_m']}M parameters, {rows} rows of 2 adapters: {got['ms_per_step']} ms "
        f"per step = {got['decode_tokens_per_s']} tokens/s ({got['call_tokens_per_s']} with prefill, "
        f"{long} tokens); peak GPU memory {got['peak_gpu_mb']:.0f} MB",
        flush=True,
    )
    return got


def long_pairs(n: int):
    """``n`` preference pairs whose answers run past any max length (cut there, as a job cuts)."""
    import pandas as pd

    def answer(k: int, verb: str) -> str:
        return " ".join(f"Step {i}: {verb} {k * i + 3} apples and {i + 7} pears." for i in range(60))

    return pd.DataFrame(
        {
            "prompt": [f"Question {k}: how many apples are there? Explain step by step." for k in range(n)],
            "chosen": [answer(k, "add") for k in range(n)],
            "rejected": [answer(k + 1, "take away") for k in range(n)],
        }
    )


def dpo_part(run: PartRun) -> dict:
    """(c) One DPO job (``dpo_members``, batch 1) of a member with a LoRA adapter at
    :data:`DPO_SHAPE`, timed by bench_dpo.py's breakdown: ms per step, the model's forward and
    backward's share of the steps and of the job, each part's seconds, peak GPU memory."""
    import bench_dpo
    import torch

    from sparta.members import MemberSpec
    from sparta.settings import DPOSettings, LoraSettings, Runtime
    from sparta.train import dpo_members

    pairs, max_length = (2, 128) if run.small else (DPO_PAIRS, DPO_MAX_LENGTH)
    (base, adapter, n_params), _ = part_base(run, DPO_SHAPE, keep=False)
    free_memory()  # the peak is the job's, not the base's build
    member = (MemberSpec("m", str(base), str(adapter)), run.work / "dpo", 0)
    runtime = Runtime(seed=0, device=run.dev, dtype=run.dtype, system_prompt=SYSTEM)
    clock = bench_dpo.synchronizer(run.dev)
    with bench_dpo.timed_trainer(run.dev) as calls:
        clock()
        start = time.perf_counter()
        (summary,) = dpo_members(
            [member], long_pairs(pairs), DPOSettings(max_length=max_length), LoraSettings(), runtime
        )
        clock()
        took = time.perf_counter() - start
    if not (calls["step"] and calls["epoch_end"]):
        raise RuntimeError("no DPO step was timed: the trainer no longer calls bench_dpo.TIMED's methods")
    parts = bench_dpo.job_parts(took, calls)
    steps, in_steps = summary["steps"], sum(parts[p] for p in bench_dpo.STEP_PARTS)
    model = parts["model forward"] + parts["model backward"]
    each = [1000 * (e - s) for s, e in calls["step"]]  # training_step: forward and backward
    got = {
        "shape": DPO_SHAPE,
        "params_m": round(n_params / 1e6, 1),
        "pairs": pairs,
        "max_length": max_length,
        "steps": steps,
        "job_s": round(took, 2),
        "step_ms": round(1000 * in_steps / steps, 1),
        "training_step_ms": {"first": round(each[0], 1), "median": round(sorted(each)[len(each) // 2], 1)},
        "model_share_of_steps": round(model / in_steps, 3),
        "model_share_of_job": round(model / took, 3),
        "parts_s": {k: round(v, 3) for k, v in parts.items()},
        "peak_gpu_mb": round(peak_mb(torch), 1),
    }
    print(
        f"dpo {DPO_SHAPE}: {steps} steps (max length {max_length}) of {got['step_ms']} ms, the model's "
        f"forward and backward {100 * got['model_share_of_steps']:.0f}% of them; job {took:.1f} s; "
        f"peak GPU memory {got['peak_gpu_mb']:.0f} MB",
        flush=True,
    )
    return got


def tiny_part(args, figures: dict, run: PartRun) -> dict:
    """Steps 1-4 (:func:`tiny_stage`); their figures stay at the JSON's top level, as before."""
    before = set(figures)
    (run.work / "tiny").mkdir(exist_ok=True)
    tiny_stage(args, figures, run.dev, run.dtype, run.work / "tiny")
    return {"figures": sorted(set(figures) - before)}


def run_parts(args, figures: dict, run: PartRun, deadline: float, save) -> list[str]:
    """Every part of ``args.part_names`` in turn, each within its budget; the failed ones."""
    fns = {
        "machine": lambda: machine_part(run),
        "steps": lambda: steps_part(run),
        "decode": lambda: decode_part(run),
        "dpo": lambda: dpo_part(run),
        "tiny": lambda: tiny_part(args, figures, run),
    }
    failed = []
    for name in args.part_names:
        budget = PART_BUDGETS[name] if run.dev == "cuda" else None  # a CPU: a smoke test's sizes
        if not run_part(figures["parts"], name, fns[name], budget, deadline):
            failed.append(name)
        save()
    return failed


def headline(name: str, got: dict) -> str:
    """A done part's figures in a line."""
    if name == "machine":
        versions = ", ".join(f"{p} {got[p]}" for p in ("torch", "transformers", "peft", "trl"))
        return (
            f"{got['gpu'] or 'no GPU'} (capability {got.get('capability', '-')}), {versions}; {got['date']}"
        )
    if name == "steps":
        return "; ".join(
            f"{key}: greedy {c['greedy']['ops']:.0f} ops, {c['greedy']['lifted']:.0f} lifted, "
            f"sampled {c['sampled']['ops']:.0f} ops, {c['sampled']['lifted']:.0f} lifted"
            for key, c in got["counts"].items()
        )
    if name == "decode":
        shapes = [(s, got[s]) for s in PART_LAYOUTS]
        return "; ".join(
            f"{s}: {g['decode_tokens_per_s']} tokens/s at {g['rows']} rows, {g['peak_gpu_mb']:.0f} MB"
            for s, g in shapes
        )
    if name == "dpo":
        return (
            f"{got['shape']}, max length {got['max_length']}: {got['step_ms']} ms per step, model "
            f"{100 * got['model_share_of_steps']:.0f}% of the steps, {got['peak_gpu_mb']:.0f} MB"
        )
    return f"{len(got.get('figures', []))} figures at the JSON's top level"


def print_summary(parts: dict) -> None:
    print("parts:")
    for name, got in parts.items():
        if got["status"] == "done":
            print(f"  {name} ({got['seconds']} s): {headline(name, got)}")
            continue
        why = got.get("reason") or got.get("error")
        why = why or "; ".join(f"{s}: {got[s]['error']}" for s in got.get("failed", []))
        print(f"  {name}: {got['status']}: {why}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="GPU check: the model stages (sampled generation, expected-score judging, DPO "
        "steps; vLLM too where it imports) on CUDA through the workflow's own code, each timed, one "
        "line per figure. Needs this repository's checkout (it imports workflow/ and tests/), "
        "requirements.txt installed (a CUDA build of torch; transformers, peft, trl, datasets) and "
        "one CUDA GPU. Needs no network and downloads nothing: every model has random weights and a "
        "tiny test tokenizer stands in, except that --shapes and --workflow read a tokenizer from a "
        "local model folder (--tokenizer). --parts all keeps within --budget; --smoke runs every part "
        "at tiny size on a CPU."
    )
    out = Path(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else None
    parser.add_argument("--out", default=out, help="the figures as JSON (default: $OUT/gpu_check.json)")
    parser.add_argument("--prompts", type=int, help="tiny stage: prompts (default 64; --smoke: 4)")
    parser.add_argument("--new-tokens", type=int, help="tiny stage: answer tokens (default 64; --smoke: 4)")
    parser.add_argument("--device", default="cuda", help="cuda (the check); cpu runs it as a smoke test")
    parser.add_argument(
        "--parts", help=f"comma-separated, of {', '.join(PART_BUDGETS)}, or all (default: machine,tiny)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds the parts may take together from the start (default 420 on a GPU, 3600 on a CPU)",
    )
    parser.add_argument("--smoke", action="store_true", help="every part at tiny size on the CPU")
    parser.add_argument("--shapes", default="", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=default_tokenizer_folder(),
        help="model folder whose tokenizer (and SmolLM2 config) the shapes and the workflow use "
        "(default: the converted base of a local run, results/_bases/smollm2)",
    )
    parser.add_argument("--workflow", action="store_true", help="also run the embedded default")
    parser.add_argument("--cores", type=int, default=16, help="snakemake --cores of the workflow")
    parser.add_argument("--workflow-overlay", type=Path, help="a config merged over config.yaml")
    parser.add_argument("--scale", type=float, default=1.0, help="the shapes' prompts and tokens times this")
    parser.add_argument("--layers", type=int, help="smoke test: the shapes with this many layers")
    parser.add_argument("--work", type=Path, help="scratch folder (default: /dev/shm if it has 40 GB free)")
    parser.add_argument("--skip-tiny", action="store_true", help="only the shapes, the workflow, other parts")
    args = parser.parse_args(argv)
    if args.smoke:
        args.device = "cpu"
    asked = args.parts or ("all" if args.smoke else "machine,tiny")
    asked = list(PART_BUDGETS) if asked == "all" else [p for p in asked.split(",") if p]
    if set(asked) - set(PART_BUDGETS):
        parser.error(
            f"unknown part(s) {sorted(set(asked) - set(PART_BUDGETS))}: use {', '.join(PART_BUDGETS)}"
        )
    skip = {"tiny"} if args.skip_tiny else set()
    args.part_names = [p for p in PART_BUDGETS if (p in asked or p == "machine") and p not in skip]
    args.prompts = args.prompts or (4 if args.smoke else 64)
    args.new_tokens = args.new_tokens or (4 if args.smoke else 64)
    args.budget = args.budget or (420.0 if args.device == "cuda" else 3600.0)
    args.shape_names = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in args.shape_names if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}: use {', '.join(SHAPES)}")
    if (args.shape_names or args.workflow) and not (args.tokenizer / "tokenizer_config.json").is_file():
        parser.error(
            f"--tokenizer {args.tokenizer}: no tokenizer there (a model folder, e.g. a converted base)"
        )
    return args


def run_workflow(args, tmp: Path, dev: str, figures: dict) -> list[str]:
    """The embedded default (step 6), its log and its jobs' logs beside ``--out``."""
    failed = []
    try:
        workflow_stage(args.tokenizer, tmp, dev, args.cores, figures, args.workflow_overlay)
    except Exception as e:  # noqa: BLE001
        failed.append("workflow")
        print(f"workflow: FAILED {e}", flush=True)
    if args.out:
        log = tmp / "workflow.log"
        if log.is_file():
            shutil.copy(log, Path(args.out).with_name("workflow.log"))
        logs = tmp / "run" / "results" / "gpu-default" / "logs"
        if logs.is_dir():  # every job's log, for a failure's cause
            shutil.make_archive(str(Path(args.out).with_name("workflow-logs")), "gztar", logs)
    return failed


def run_shapes(args, tmp: Path, dev: str, dtype: str, figures: dict, save) -> list[str]:
    """Step 5 at each of ``--shapes``; the failed ones."""
    failed = []
    for shape in args.shape_names:
        try:
            shape_stage(shape, args.tokenizer, tmp, dev, dtype, figures, args.scale, args.layers)
        except Exception as e:  # noqa: BLE001 -- report, go on with the next stage
            failed.append(shape)
            print(f"{shape}: FAILED {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
        save()
    return failed


def scratch_folder(work: Path | None) -> Path:
    if work is None and Path("/dev/shm").is_dir() and shutil.disk_usage("/dev/shm").free > 40e9:
        work = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="sparta-gpu-", dir=work))


def main(argv=None) -> int:
    started = time.monotonic()
    args = parse_args(argv)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (--device cpu or --smoke for a smoke test)")
        return 2
    dev, dtype = args.device, "bfloat16" if args.device == "cuda" else "float32"
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    figures: dict[str, object] = {"device": name, "torch": torch.__version__, "parts": {}}
    print(f"device: {figures['device']}  torch {torch.__version__}", flush=True)
    tmp = scratch_folder(args.work)
    if args.out:  # the figures, the workflow's log and its jobs' logs go beside each other
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every stage: a run cut short still leaves what it measured
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2))

    run = PartRun(dev, dtype, tmp)
    failed = run_parts(args, figures, run, started + args.budget, save)
    if args.workflow:
        failed += run_workflow(args, tmp, dev, figures)
        save()
    failed += run_shapes(args, tmp, dev, dtype, figures, save)
    figures["failed"] = failed
    save()
    shutil.rmtree(tmp, ignore_errors=True)
    print_summary(figures["parts"])
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
