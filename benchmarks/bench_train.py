"""Training at the machine's real speed: the embedded default's SFT (initial pool) and DPO
(one iteration) in every way of filling the cores, with the CPU's features.

    python benchmarks/bench_train.py [--cores 2] [--cache results/_bench] [--stages sft,dpo]

Prints the CPU (model, PyTorch's vector kernel level, native bf16), then per stage and per
layout of the jobs: wall seconds, CPU seconds, cores used (CPU-s / wall-s) and seconds per
training step, each layout in a fresh folder through `snakemake` (what a user waits for).

Layouts on C cores:
- ``C threads x 1 job``: one job at a time, every core to it (``--set-threads <rule>=C``);
- ``1 thread x C jobs``: C one-thread jobs side by side (``--set-threads <rule>=1``);
- ``pool``: one job trains every member on one base load with every core
  (``dpo_fanout: pool``; DPO only).
It also times one linear layer of the model (576 x 1536 on 512 tokens) in fp32 and under
CPU bf16 autocast, the slowdown that TRL's default precision caused on CPUs without native bf16.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))

from bench_iteration import MEMBERS, default_config, snakemake  # noqa: E402


def cpu_report() -> dict:
    import torch

    from sparta.models import cpu_features

    return {**cpu_features(), "torch_threads": torch.get_num_threads()}


def linear_bf16_ratio(repeats: int = 20) -> dict:
    """ms of one 576x1536 linear layer on 512 tokens, fp32 and under CPU bf16 autocast."""
    import torch

    torch.manual_seed(0)
    layer, x = torch.nn.Linear(576, 1536), torch.randn(512, 576)
    out = {}
    for name, autocast in (("fp32", False), ("bf16_autocast", True)):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            layer(x)
            start = time.perf_counter()
            for _ in range(repeats):
                layer(x)
        out[f"{name}_ms"] = (time.perf_counter() - start) / repeats * 1000
    out["ratio"] = out["bf16_autocast_ms"] / out["fp32_ms"]
    return out


def steps_of(folder: Path, iteration: int) -> int:
    logs = [
        pd.read_parquet(p) for p in folder.glob(f"results/*/iter_{iteration}/members/*/training_log.parquet")
    ]
    return int(sum(int(t["step"].max()) for t in logs if len(t))) if logs else 0


def layout_flags(layout: str, rule: str, cores: int) -> tuple[list[str], dict]:
    """snakemake flags and config overrides of one layout."""
    if layout == "pool":
        return [], {"dpo_fanout": "pool"}
    threads = cores if layout == "cores" else 1
    return ["--set-threads", f"{rule}={threads}"], ({"dpo_fanout": "member"} if rule == "dpo" else {})


LAYOUT_NAMES = {
    "cores": "{c} threads x 1 job",
    "single": "1 thread x {c} jobs",
    "pool": "pool (1 job, {c} threads)",
}


def bench_sft(cache: Path, cores: int, layouts: list[str]) -> dict:
    out = {}
    base = cache / "sft_base"
    if not (base / "results" / "_bases" / "smollm2" / "config.json").is_file():
        print("converting the base once (cached) ...", flush=True)
        cfg = cache / "base.yaml"
        cfg.write_text(yaml.safe_dump({**default_config(), "experiment": "base"}))
        snakemake(base, cfg, cores, "results/_bases/smollm2/config.json")
    for layout in layouts:
        work = cache / f"sft_{layout}"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base / "results" / "_bases", work / "results" / "_bases")
        flags, over = layout_flags(layout, "sft_member", cores)
        cfg = {**default_config(), **over, "experiment": "bench"}
        path = cache / f"sft_{layout}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        targets = [f"results/bench/iter_0/members/{m}/member.json" for m in MEMBERS]
        wall, cpu = snakemake(work, path, cores, *targets, *flags)
        steps = steps_of(work, 0)
        out[layout] = {"wall_s": wall, "cpu_s": cpu, "cores_used": cpu / wall, "steps": steps}
        out[layout]["s_per_step"] = wall / max(steps, 1)
        print(f"  sft {LAYOUT_NAMES[layout].format(c=cores)}: {out[layout]}", flush=True)
    return out


def bench_dpo(cache: Path, cores: int, layouts: list[str], adapters: dict[str, str]) -> dict:
    """One default iteration's DPO of the 4 members (12 duels' pairs), the pairs made once."""
    prepared = cache / "dpo_prepared"
    cfg = default_config()
    cfg.update(
        experiment="bench",
        iterations=1,
        base_models={"smollm2": {"path": str(cache / "sft_base" / "results" / "_bases" / "smollm2")}},
        members=[{"name": m, "base": "smollm2", "adapter": path} for m, path in adapters.items()],
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    cfg.pop("sft", None)
    if not (prepared / "results/bench/iter_1/preferences.parquet").is_file():
        print("one round's pairs once (cached) ...", flush=True)
        path = cache / "dpo_prepare.yaml"
        path.write_text(yaml.safe_dump(cfg))
        snakemake(prepared, path, cores, "results/bench/iter_1/preferences.parquet")
    pairs = len(pd.read_parquet(prepared / "results/bench/iter_1/preferences.parquet"))
    out = {}
    for layout in layouts:
        work = cache / f"dpo_{layout}"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(prepared, work, symlinks=True)
        shutil.rmtree(work / ".snakemake", ignore_errors=True)
        flags, over = layout_flags(layout, "dpo", cores)
        path = cache / f"dpo_{layout}.yaml"
        path.write_text(yaml.safe_dump({**cfg, **over}))
        targets = [f"results/bench/iter_1/members/{m}/member.json" for m in MEMBERS]
        wall, cpu = snakemake(work, path, cores, *targets, *flags, "--rerun-triggers", "mtime")
        steps = steps_of(work, 1)
        out[layout] = {"wall_s": wall, "cpu_s": cpu, "cores_used": cpu / wall, "steps": steps, "pairs": pairs}
        out[layout]["s_per_step"] = wall / max(steps, 1)
        print(f"  dpo {LAYOUT_NAMES[layout].format(c=cores)}: {out[layout]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--cache", default=str(REPO / "results" / "_bench"))
    ap.add_argument("--stages", default="sft,dpo")
    ap.add_argument("--layouts", default="cores,single,pool")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    cache = Path(args.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    layouts = args.layouts.split(",")
    figures: dict = {"cpu": cpu_report(), "linear_layer": linear_bf16_ratio()}
    print(f"CPU: {figures['cpu']}")
    lin = figures["linear_layer"]
    print(
        f"576x1536 linear on 512 tokens: fp32 {lin['fp32_ms']:.1f} ms, bf16 autocast "
        f"{lin['bf16_autocast_ms']:.1f} ms ({lin['ratio']:.2f}x)"
    )
    stages = args.stages.split(",")
    sft_layouts = [x for x in layouts if x != "pool"] or ["single"]  # SFT has no pool job
    if "sft" in stages or "dpo" in stages:
        figures["sft"] = bench_sft(cache, args.cores, sft_layouts if "sft" in stages else ["single"])
    if "dpo" in stages:
        first = cache / f"sft_{sft_layouts[-1] if 'sft' in stages else 'single'}" / "results" / "bench"
        first = first / "iter_0" / "members"
        adapters = {m: str(first / m / "adapter") for m in MEMBERS}
        figures["dpo"] = bench_dpo(cache, args.cores, layouts, adapters)
    print(f"\n{'stage / layout':34}{'wall s':>9}{'CPU s':>9}{'cores':>7}{'steps':>7}{'s/step':>8}")
    for stage in ("sft", "dpo"):
        for layout, r in figures.get(stage, {}).items():
            name = f"{stage} {LAYOUT_NAMES[layout].format(c=args.cores)}"
            print(
                f"{name:34}{r['wall_s']:9.1f}{r['cpu_s']:9.1f}{r['cores_used']:7.2f}{r['steps']:7d}{r['s_per_step']:8.2f}"
            )
    if "sft" in figures and "dpo" in figures:
        best = {s: min(figures[s].values(), key=lambda r: r["wall_s"]) for s in ("sft", "dpo")}
        ratio = best["sft"]["s_per_step"] / best["dpo"]["s_per_step"]
        print(f"SFT step / DPO step (fastest layouts): {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
