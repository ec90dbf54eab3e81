"""One iteration of the embedded default pool (4 SmolLM2-135M members, their SFT adapters given,
12 duels), in both fan-outs, stage by stage: wall and CPU time, combat tokens/s, judgments/s,
DPO steps/s, and the ratio pool / member.

    python benchmarks/bench_iteration.py [--cores 2] [--cache results/_bench] [--round-only]

``--round-only``: combat, judging and aggregation, no DPO (the round a user waits for between
two trainings; with `yes > /dev/null` beside it, the round under load); with ``--one-call`` the
round is one ``snakemake`` call, as a run pays for it (its start once), without the stages' split.

The four adapters come from the default's own SFT, run once into the cache folder (a few
minutes the first time). Each fan-out then runs in a fresh working folder: the tables and
prompt split first (not timed), then combat, judging, aggregation and DPO, each as its own
`snakemake` call (timed whole, snakemake's start included: what a user waits for).
Targets on 2 cores: combat + judging + aggregation under 45 s, DPO of the 4 members under
75 s, in the faster fan-out.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
MEMBERS = ("adder", "subtractor", "multiplier", "storyteller")


def snakemake(work: Path, config: Path, cores: int, *targets: str) -> tuple[float, float]:
    """Run snakemake for ``targets``; (wall seconds, CPU seconds of everything it ran)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "snakemake", *targets, "-s", str(REPO / "Snakefile"), "-d", str(work)]
    cmd += ["--configfile", str(config), "--cores", str(cores)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def default_config() -> dict:
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["prompts"]["file"] = str(REPO / cfg["prompts"]["file"])
    cfg["sft"] = {**cfg.get("sft", {}), "data_dir": str(REPO / "data" / "sft")}
    return cfg


def adapters(cache: Path, cores: int) -> dict[str, str]:
    """The default pool's SFT adapters, trained once into the cache."""
    work = cache / "sft"
    exp = work / "results" / "default" / "iter_0" / "members"
    if not all((exp / m / "adapter" / "adapter_model.safetensors").is_file() for m in MEMBERS):
        print("training the default pool's SFT adapters once (cached) ...", flush=True)
        cfg = cache / "sft.yaml"
        cfg.write_text(yaml.safe_dump(default_config()))
        snakemake(work, cfg, cores, *[f"results/default/iter_0/members/{m}/member.json" for m in MEMBERS])
    return {m: str(exp / m / "adapter") for m in MEMBERS}


def run_fanout(
    fanout: str, cache: Path, given: dict[str, str], cores: int, dpo: bool = True, one_call: bool = False
) -> dict:
    work = cache / f"iteration_{fanout}"
    shutil.rmtree(work, ignore_errors=True)
    cfg = default_config()
    cfg.update(
        experiment="bench",
        iterations=1,
        fanout=fanout,
        base_models={"smollm2": {"path": str(cache / "sft" / "results" / "_bases" / "smollm2")}},
        members=[{"name": m, "base": "smollm2", "adapter": path} for m, path in given.items()],
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    cfg.pop("sft", None)
    config = cache / f"{fanout}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    rnd = "results/bench/iter_1/round_0"
    members = [f"results/bench/iter_0/members/{m}/member.json" for m in MEMBERS]
    snakemake(work, config, cores, f"{rnd}/duels.parquet", *members)  # prompts, members, state: not timed
    stages = {
        "combat": [f"{rnd}/responses/{m}.parquet" for m in MEMBERS],
        "judge": [f"{rnd}/judgments/{m}.parquet" for m in MEMBERS],
        "aggregate": [f"{rnd}/history.parquet", "results/bench/iter_1/preferences.parquet"],
        "dpo": [f"results/bench/iter_1/members/{m}/member.json" for m in MEMBERS],
    }
    if not dpo:
        stages.pop("dpo")
    figures: dict[str, float] = {}
    if one_call:  # the round as a run pays for it: one snakemake call, its start once
        targets = [t for k in ("combat", "judge", "aggregate") for t in stages[k]]
        figures["round_wall_s"], figures["round_cpu_s"] = snakemake(work, config, cores, *targets)
    else:
        for stage, targets in stages.items():
            figures[f"{stage}_wall_s"], figures[f"{stage}_cpu_s"] = snakemake(work, config, cores, *targets)
        figures["round_wall_s"] = sum(figures[f"{s}_wall_s"] for s in ("combat", "judge", "aggregate"))
    out = work / "results" / "bench"
    responses = pd.concat([pd.read_parquet(out / f"iter_1/round_0/responses/{m}.parquet") for m in MEMBERS])
    judgments = pd.concat([pd.read_parquet(out / f"iter_1/round_0/judgments/{m}.parquet") for m in MEMBERS])
    pairs = len(pd.read_parquet(out / "iter_1/preferences.parquet"))
    figures["tokens"] = int(responses["n_tokens"].sum())
    figures["judgments"] = len(judgments)
    figures["dpo_steps"] = pairs * len(MEMBERS)  # 1 epoch, batch 1
    if not one_call:
        figures["combat_tokens_per_s"] = figures["tokens"] / figures["combat_wall_s"]
        figures["judgments_per_s"] = figures["judgments"] / figures["judge_wall_s"]
    if dpo:
        figures["dpo_steps_per_s"] = figures["dpo_steps"] / figures["dpo_wall_s"]
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--cache", default=str(REPO / "results" / "_bench"))
    ap.add_argument("--fanouts", default="member,pool")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--round-only", action="store_true", help="combat, judging, aggregation: no DPO")
    ap.add_argument(
        "--one-call", action="store_true", help="with --round-only: the round as one snakemake call"
    )
    args = ap.parse_args()
    cache = Path(args.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    given = adapters(cache, args.cores)
    dpo = not args.round_only
    one = args.one_call and args.round_only
    results = {f: run_fanout(f, cache, given, args.cores, dpo, one) for f in args.fanouts.split(",")}
    rows = [
        ("combat wall / CPU s", "combat_wall_s", "combat_cpu_s"),
        ("judging wall / CPU s", "judge_wall_s", "judge_cpu_s"),
        ("aggregation wall / CPU s", "aggregate_wall_s", "aggregate_cpu_s"),
        ("combat + judging + aggregation wall s", "round_wall_s", None),
        ("DPO of 4 members wall / CPU s", "dpo_wall_s", "dpo_cpu_s"),
        ("combat tokens/s", "combat_tokens_per_s", None),
        ("judgments/s", "judgments_per_s", None),
        ("DPO steps/s", "dpo_steps_per_s", None),
    ]
    names = list(results)
    sys.path.insert(0, str(REPO / "workflow"))
    from sparta.models import cpu_features

    print(f"CPU: {cpu_features()}")
    print(f"one default iteration on {args.cores} cores (12 duels, 4 members, adapters given)")
    print(f"{'':40}" + "".join(f"{n:>18}" for n in names) + ("   pool/member" if len(names) == 2 else ""))
    for label, wall, cpu in rows:
        if wall not in results[names[0]]:
            continue  # --round-only: no DPO; --one-call: no stages
        cells = []
        for n in names:
            r = results[n]
            cells.append(f"{r[wall]:8.1f}" + (f" / {r[cpu]:6.1f}" if cpu else "         "))
        ratio = ""
        if len(names) == 2:
            ratio = f"   {results['pool'][wall] / results['member'][wall]:.2f}"
        print(f"{label:40}" + "".join(f"{c:>18}" for c in cells) + ratio)
    stages = ["round"] if one else ["combat", "judge", "aggregate", *([] if args.round_only else ["dpo"])]
    for stage in stages:  # CPU-s / wall-s
        used = "".join(
            f"{results[n][f'{stage}_cpu_s'] / results[n][f'{stage}_wall_s']:>18.2f}" for n in names
        )
        print(f"{stage + ' cores used':40}" + used)
    first = results[names[0]]
    print(f"tokens {first['tokens']}, judgments {first['judgments']}, DPO steps {first['dpo_steps']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
