"""A failing rerun keeps the previous outputs (sparta/engine/keep.py): Snakemake would delete a job's
finished outputs before rerunning it; sparta moves them aside and puts them back on failure."""

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparta.engine import keep

from .workflow_helpers import run_snakemake, tiny_config, write_config


def _job(tmp_path, outputs):
    persistence = SimpleNamespace(path=str(tmp_path / ".snakemake"))
    return SimpleNamespace(
        output=outputs, dag=SimpleNamespace(workflow=SimpleNamespace(persistence=persistence))
    )


def test_set_aside_then_restore_keeps_bytes_and_mtime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = Path("results/x/a.parquet")
    out.parent.mkdir(parents=True)
    out.write_bytes(b"finished")
    mtime = out.stat().st_mtime_ns
    job = _job(tmp_path, [str(out), "results/x/new.parquet"])
    assert keep.set_aside(job, job.output) == 1
    assert not out.exists()
    out.write_bytes(b"partial")  # what a failing job left
    assert keep.restore(keep.job_folder(job)) == [str(out)]
    assert out.read_bytes() == b"finished" and out.stat().st_mtime_ns == mtime
    assert keep.restore(keep.job_folder(job)) == [str(out)]  # idempotent: a node's, then the main's
    keep.discard(keep.job_folder(job))
    assert out.read_bytes() == b"finished" and not keep.job_folder(job).exists()


def _finished_files(work: Path) -> dict:
    """Every file of the run but the logs and benchmarks (a failed job's log holds its error)
    and the long jobs' kept progress (a failed job's finished parts, for its retry)."""
    files = {}
    for p in sorted((work / "results").rglob("*")):
        rel = p.relative_to(work).as_posix()
        if p.is_file() and not any(f"/{d}/" in rel for d in ("logs", "benchmarks", ".progress")):
            files[rel] = (p.read_bytes(), p.stat().st_mtime_ns)
    return files


@pytest.mark.slow
def test_a_failing_rerun_leaves_the_finished_run_as_it_was(run_a, tiny_base, tmp_path):
    """judge.max_length too small for the judge prompts passes every check and fails in the
    judge job: Snakemake would delete iteration 1's finished judgments before running it. Every
    finished file keeps its bytes and mtime, and with the setting back nothing reruns."""
    work = tmp_path / "work"
    shutil.copytree(run_a[0], work, symlinks=True)
    before = _finished_files(work)
    judgments = [p for p in before if "/iter_1/" in p and "/judgments/" in p]
    assert judgments
    # a finished run: a changed setting runs with replace_finished (sparta/finished.py)
    bad = write_config(
        tmp_path / "bad", tiny_config(tiny_base, judge={"max_length": 64}, replace_finished=True)
    )
    proc = run_snakemake(work, bad, check=False, cores=1)
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "set aside the" in proc.stderr and "previous output file(s) are back" in proc.stderr
    after = _finished_files(work)
    assert sorted(after) == sorted(before)
    # only the one job that succeeded wrote anything: the run's settings.yaml (record_settings,
    # which writes every setting of the run, the new judge.max_length among them)
    changed = [p for p in before if after[p] != before[p]]
    assert changed in ([], ["results/tiny/settings.yaml"]), changed
    assert not any((work / ".snakemake" / keep.FOLDER).glob("*/*"))
    # the setting back: the restored judgments are the finished ones, records included (the
    # switch again: record_settings may have written the failed attempt's settings)
    same = write_config(tmp_path / "same", tiny_config(tiny_base, replace_finished=True))
    dry = run_snakemake(work, same, "-n")
    planned = set(re.findall(r"^(?:local)?rule (\w+):", dry.stdout, flags=re.M))
    assert planned - {"all"} <= {"record_settings"}, (dry.stdout + dry.stderr)[-3000:]
