"""GPU check: the model stages on CUDA with a tiny model, in well under 5 minutes; then,
if asked, the same stages at real models' shapes and the whole embedded default workflow.

    python benchmarks/gpu_check.py [--out figures.json]
        [--shapes smollm2-135m,qwen2.5-7b --tokenizer MODEL_FOLDER] [--workflow]

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
Exits non-zero if CUDA is missing or a stage fails; prints one line per figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
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
):
    """A base model folder of ``shape`` with random weights and ``tok_folder``'s tokenizer:
    (folder, parameters, the model in memory if ``keep``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_folder)
    fewer = {"num_hidden_layers": layers} if layers else {}  # a smoke test's shortcut
    if SHAPES[shape] is None:
        cfg = AutoConfig.from_pretrained(tok_folder, **fewer)
    else:
        kw = {**SHAPES[shape], **fewer}
        cfg = AutoConfig.for_model(kw.pop("model_type"), vocab_size=len(tok), **kw)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the figures as JSON here")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda", help="cuda (the check); cpu runs it as a smoke test")
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
    parser.add_argument("--skip-tiny", action="store_true", help="only the shapes and the workflow")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}: use {', '.join(SHAPES)}")
    if (shapes or args.workflow) and not (args.tokenizer / "tokenizer_config.json").is_file():
        parser.error(
            f"--tokenizer {args.tokenizer}: no tokenizer there (a model folder, e.g. a converted base)"
        )

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (--device cpu for a smoke test)")
        return 2
    dev, dtype = args.device, "bfloat16" if args.device == "cuda" else "float32"
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    figures: dict[str, object] = {"device": name, "torch": torch.__version__}
    print(f"device: {figures['device']}  torch {torch.__version__}", flush=True)
    scratch = args.work
    if scratch is None and Path("/dev/shm").is_dir() and shutil.disk_usage("/dev/shm").free > 40e9:
        scratch = Path("/dev/shm")
    tmp = Path(tempfile.mkdtemp(prefix="sparta-gpu-", dir=scratch))
    failed = []
    if args.out:  # the figures, the workflow's log and its jobs' logs go beside each other
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every stage: a run cut short still leaves what it measured
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2))

    if not args.skip_tiny:
        tiny_stage(args, figures, dev, dtype, tmp)
        save()
    if args.workflow:
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
        save()
    for shape in shapes:
        try:
            shape_stage(shape, args.tokenizer, tmp, dev, dtype, figures, args.scale, args.layers)
        except Exception as e:  # noqa: BLE001 -- report, go on with the next stage
            failed.append(shape)
            print(f"{shape}: FAILED {type(e).__name__}: {e}", flush=True)
            import traceback

            traceback.print_exc()
        save()
    figures["failed"] = failed
    save()
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
