"""benchmarks/gpu_check.py, run as a smoke test on the CPU: every stage it times on a GPU
(a tiny model through generation, judging and DPO; a model "shape" built with random weights
from a tokenizer folder's config, two adapters in one batch, judging and DPO) runs and
reports its figures, so the script a GPU session depends on does not rot between GPU loans."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_as_a_smoke_test(tmp_path):
    folder = build_tiny_model(tmp_path / "tiny", layers=2, hidden=64)
    out = tmp_path / "out" / "figures.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    cmd += ["--prompts", "4", "--new-tokens", "4", "--shapes", "smollm2-135m", "--tokenizer", str(folder)]
    cmd += ["--scale", "0.05", "--work", str(tmp_path), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["failed"] == [] and figures["device"] == "cpu"
    assert figures["dpo_steps"] == 2 and figures["smollm2_135m_dpo_steps"] >= 2
    assert figures["smollm2_135m_generate_tokens_per_s"] > 0 and figures["smollm2_135m_judgments_per_s"] > 0
    assert figures["smollm2_135m_params_m"] < 1  # the tiny folder's own config: its shape
    assert not list(tmp_path.glob("sparta-gpu-*"))  # its scratch folder removed


def test_gpu_check_names_a_missing_tokenizer(tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    cmd += ["--shapes", "smollm2-135m", "--tokenizer", str(tmp_path / "nowhere")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no tokenizer there" in proc.stderr
