"""Running the workflow from tests: a config file in a fresh folder, snakemake as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]


def write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _test_cores() -> int:
    """Cores a test's snakemake runs with: 2 (the README's machine), shared among the
    pytest-xdist workers where the machine has no more (on 2 cores and 2 workers: 1 each).
    Two runs with 2 cores each on 2 cores put up to 8 torch threads on them: two tiny runs side
    by side took 224 s and 396 CPU-s that way, 170 s and 305 CPU-s with 1 core each
    (2026-12-03). Every run of a test session gets the same count, so runs the tests compare
    thread for thread; tests of the thread rule itself pass ``cores``."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


CORES = _test_cores()


def snakemake_cmd(workdir: Path, configfile: Path, *extra: str, cores: int | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        str(cores or CORES),
        *extra,
    ]


def run_snakemake(
    workdir: Path, configfile: Path, *extra: str, timeout: int = 1200, check=True, cores: int | None = None
):
    proc = subprocess.run(
        snakemake_cmd(workdir, configfile, *extra, cores=cores),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def read_all(workdir: Path, pattern: str) -> pd.DataFrame:
    files = sorted(workdir.glob(pattern))
    assert files, f"no file matches {pattern} under {workdir}"
    frames = [pd.read_parquet(f).assign(_file=str(f.relative_to(workdir))) for f in files]
    return pd.concat(frames, ignore_index=True)


def tiny_config(base: Path, experiment: str = "tiny", **overrides) -> dict:
    """A 3-member pool of tiny random models: 2 with a short SFT on a domain, 1 plain.
    Small on purpose: every model job pays a process start and library imports."""
    cfg = {
        "experiment": experiment,
        "seed": 7,
        "iterations": 2,
        "device": "cpu",
        "fanout": "pool",  # as the embedded default (a local run); tests of fanout member say so
        "base_models": {"tiny": {"path": str(base)}},
        "members": [
            {"name": "ann", "base": "tiny", "sft_domain": "addition"},
            {"name": "bob", "base": "tiny", "sft_domain": "multiplication"},
            {"name": "cid", "base": "tiny"},
        ],
        "sft": {"data_dir": str(REPO / "data" / "sft"), "examples": 8, "max_steps": 2, "batch_size": 4},
        "prompts": {
            "file": str(REPO / "data" / "arithmetic.jsonl"),
            "prompt_column": "prompt",
            "answer_column": "answer",
            "id_column": "prompt_id",
            "per_iteration": 6,
        },
        "matchmaking": {"alpha": 0.5, "top_k": 2, "rounds_per_iteration": 1},
        "generation": {"max_new_tokens": 8, "batch_size": 4},
        "judge": {"mode": "expected", "max_length": 512, "batch_size": 4},
        "dpo": {"learning_rate": 1.0e-3, "max_length": 256},
        "evaluation": {
            "batch_size": 8,
            "tasks": [
                {
                    "name": "arith",
                    "source": "prompts",
                    "metric": "exact_match",
                    "max_new_tokens": 8,
                    "max_examples": 4,
                }
            ],
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def stand_in_safetensors(path: Path, tensors: dict[str, list[int]] | None = None) -> None:
    """A well-formed safetensors file of float32 zeros (default: one tensor ``stand_in`` of
    one value): its header reads as a real file's does, for the content checks."""
    import json
    import math
    import struct

    header, offset = {}, 0
    for name, shape in (tensors or {"stand_in": [1]}).items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def fake_model_folder(folder: Path, adapter: bool = False) -> None:
    """A stand-in model or adapter folder (a config and a stand-in weights file): enough for
    the config checks and a dry run, never loaded."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    if adapter:
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 16}))
        stand_in_safetensors(folder / "adapter_model.safetensors")
    else:
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
        stand_in_safetensors(folder / "model.safetensors")


def paper_workspace(work: Path, config_path: Path) -> Path:
    """The files the paper-scale config points at, as stand-ins (for `snakemake -n`)."""
    import json

    cfg = yaml.safe_load(config_path.read_text())
    local = lambda value: value and not str(value).startswith("hf://")  # noqa: E731 (hub ids: planned)
    for spec in cfg["base_models"].values():
        if local(spec["path"]):
            fake_model_folder(work / spec["path"])
    for m in cfg["members"]:
        if local(m["adapter"]):
            fake_model_folder(work / m["adapter"], adapter=True)
    if cfg["prompts"].get("file"):
        prompts = work / cfg["prompts"]["file"]
        prompts.parent.mkdir(parents=True, exist_ok=True)
        rows = ({"prompt": f"Question {i}?", "reference": f"Answer {i}."} for i in range(9000))
        prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for task in cfg["evaluation"]["tasks"]:
        if not task.get("file"):
            continue  # a hub dataset: its download and split are part of the plan
        rows = [
            {"question": f"q{i}", "answer": str(i), "options": ["yes", "no"], "labels": [1, 0]}
            for i in range(6)
        ]
        (work / task["file"]).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return work
