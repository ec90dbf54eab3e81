"""benchmarks/gpu_check.py, run as a smoke test on the CPU: every stage it times on a GPU
(a tiny model through generation, judging and DPO; a model "shape" built with random weights
from a tokenizer folder's config, two adapters in one batch, judging and DPO) and every part
(the machine, bench_step.py's counts, decoding at two shapes, a DPO job's breakdown) runs and
reports its figures, so the script a GPU session depends on does not rot between GPU loans;
and a part that fails, runs past its budget or has too little time left is recorded with why."""

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[1]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_as_a_smoke_test(tmp_path):
    folder = build_tiny_model(tmp_path / "tiny", layers=2, hidden=64)
    out = tmp_path / "out" / "figures.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--smoke"]
    cmd += ["--prompts", "4", "--new-tokens", "4", "--shapes", "smollm2-135m", "--tokenizer", str(folder)]
    cmd += ["--scale", "0.05", "--work", str(tmp_path), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["failed"] == [] and figures["device"] == "cpu"
    assert figures["dpo_steps"] == 2 and figures["smollm2_135m_dpo_steps"] >= 2
    assert figures["smollm2_135m_generate_tokens_per_s"] > 0 and figures["smollm2_135m_judgments_per_s"] > 0
    assert figures["smollm2_135m_params_m"] < 1  # the tiny folder's own config: its shape
    assert not list(tmp_path.glob("sparta-gpu-*"))  # its scratch folder removed

    parts = figures["parts"]
    assert list(parts) == ["machine", "steps", "decode", "dpo", "tiny"]
    assert {p["status"] for p in parts.values()} == {"done"}, {k: p.get("error") for k, p in parts.items()}
    assert parts["machine"]["torch"] and parts["machine"]["trl"] and parts["machine"]["date"]
    for key in ("2 rows, 1 adapters", "4 rows, 2 adapters"):
        assert parts["steps"]["counts"][key]["greedy"]["ops"] > 0
        assert parts["steps"]["counts"][key]["sampled"]["lifted"] >= 0
    for shape in ("smollm2-135m", "qwen2.5-7b"):
        decode = parts["decode"][shape]
        assert decode["rows"] == 4 and decode["call_tokens_per_s"] > 0 and "decode_tokens_per_s" in decode
    dpo = parts["dpo"]
    assert dpo["shape"] == "qwen2.5-7b" and dpo["steps"] == 2 and 0 < dpo["model_share_of_steps"] <= 1
    assert "dpo_steps" in parts["tiny"]["figures"]


def test_a_part_is_recorded_done_skipped_or_failed_with_why():
    check = gpu_check()
    parts: dict = {}
    deadline = time.monotonic() + 60
    assert check.run_part(parts, "quick", lambda: {"figure": 1}, 5, deadline)
    assert check.run_part(parts, "long", lambda: {"figure": 1}, 120, deadline)  # 60 s left
    assert not check.run_part(parts, "broken", lambda: {"figure": 1 / 0}, 5, deadline)
    assert not check.run_part(parts, "slow", lambda: time.sleep(10) or {}, 0.3, deadline)
    assert not check.run_part(parts, "half", lambda: {"failed": ["x"], "x": {"error": "E"}}, 5, deadline)
    assert parts["quick"]["status"] == "done" and parts["quick"]["figure"] == 1
    assert parts["long"] == {"status": "skipped", "reason": parts["long"]["reason"], "budget_s": 120}
    assert "needs up to 120 s" in parts["long"]["reason"]
    assert parts["broken"]["status"] == "failed" and "ZeroDivisionError" in parts["broken"]["error"]
    assert parts["slow"]["status"] == "failed" and "ran past its budget" in parts["slow"]["error"]
    assert parts["slow"]["seconds"] < 5
    assert parts["half"]["status"] == "failed" and parts["half"]["x"] == {"error": "E"}


def test_smoke_asks_for_every_part_on_the_cpu():
    check = gpu_check()
    args = check.parse_args(["--smoke"])
    assert args.device == "cpu" and args.part_names == list(check.PART_BUDGETS)
    assert args.prompts == 4 and args.budget == 3600
    args = check.parse_args(["--parts", "dpo", "--out", "x.json"])
    assert args.part_names == ["machine", "dpo"] and args.budget == 420 and args.prompts == 64
    assert check.parse_args(["--skip-tiny"]).part_names == ["machine"]


def test_gpu_check_names_a_missing_tokenizer(tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    cmd += ["--shapes", "smollm2-135m", "--tokenizer", str(tmp_path / "nowhere")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no tokenizer there" in proc.stderr
