"""Integrity of finished files (sparta/engine/integrity.py): recorded when a job succeeds, checked
when a run starts; a damaged file is reported and rebuilt with what depends on it."""

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparta.engine import integrity

from .workflow_helpers import run_snakemake


def test_damage_by_size_content_and_footer(tmp_path, capsys):
    root = tmp_path / ".snakemake"
    table, note = tmp_path / "t.parquet", tmp_path / "m.json"
    pq.write_table(pa.table({"x": [1, 2, 3]}), table)
    note.write_text('{"a": 1}')
    assert integrity.check(root, [table, note, tmp_path / "none.json"]) == ([], [])  # recorded now
    assert integrity.record_path(root, str(note)).is_file()
    st = note.stat()
    os.utime(note, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same content
    assert integrity.check(root, [note]) == ([], [])
    note.write_text('{"a": 2}')  # same size, other content
    data = table.read_bytes()
    table.write_bytes(data[: len(data) // 2])  # truncated: no footer
    damaged, missing = integrity.check(root, [table, note])
    assert damaged == [str(table), str(note)] and missing == []
    err = capsys.readouterr().err
    assert f"sparta: damaged: {table}: not a readable Parquet table" in err
    assert f"sparta: damaged: {note}: its content changed since it was written" in err
    note.unlink()
    assert integrity.check(root, [note]) == ([], [str(note)])


def _files(work: Path) -> dict:
    return {
        p.relative_to(work).as_posix(): p.read_bytes()
        for p in sorted((work / "results").rglob("*"))
        if p.is_file() and "/logs/" not in p.as_posix() and "/benchmarks/" not in p.as_posix()
    }


@pytest.mark.slow
def test_a_damaged_table_is_reported_and_rebuilt(run_a, tmp_path):
    """final_state.parquet truncated after the run: the plain rerun names it and rebuilds it
    (and what depends on it); every file ends as the undamaged run's, byte for byte."""
    work = tmp_path / "work"
    shutil.copytree(run_a[0], work, symlinks=True)
    cfg = run_a[0].parent / "config.yaml"
    before = _files(work)
    final = work / "results/tiny/final_state.parquet"
    final.write_bytes(final.read_bytes()[:100])
    dry = run_snakemake(work, cfg, "-n")
    assert "sparta: damaged: results/tiny/final_state.parquet" in dry.stderr, dry.stderr[-3000:]
    assert "Nothing to be done" not in dry.stdout + dry.stderr
    proc = run_snakemake(work, cfg)
    assert "sparta: damaged: results/tiny/final_state.parquet" in proc.stderr
    after = _files(work)
    assert sorted(after) == sorted(before)
    assert [p for p in before if after[p] != before[p]] == []
    again = run_snakemake(work, cfg, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    assert "damaged" not in again.stderr


MINI = """
import sys
sys.path.insert(0, {workflow!r})
from sparta.engine import integrity

integrity.shared_bases(workflow, ["make_base"])


rule all:
    input:
        "member.txt",
        "base/config.json",


rule make_base:
    output:
        "base/config.json",
    params:
        content=config.get("content", "same"),
    shell:
        "echo {{params.content}} > {{output}}"


rule member:
    input:
        "base/config.json",
    output:
        "member.txt",
    shell:
        "cat {{input}} > {{output}}; echo trained >> {{output}}"
"""


def _mini(tmp_path, *extra):
    import subprocess
    import sys

    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(MINI.format(workflow=str(Path(__file__).resolve().parents[1] / "workflow")))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(snakefile),
        "-d",
        str(tmp_path / "work"),
        "--cores",
        "1",
    ]
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_deleted_shared_base_is_rebuilt_and_retrains_nothing_with_the_same_bytes(tmp_path):
    _mini(tmp_path)
    work = tmp_path / "work"
    member = work / "member.txt"
    mtime = member.stat().st_mtime_ns
    shutil.rmtree(work / "base")
    dry = _mini(tmp_path, "-n")
    assert "rule make_base:" in dry and "rule member:" not in dry, dry
    _mini(tmp_path)
    assert (work / "base/config.json").read_text() == "same\n"
    assert member.stat().st_mtime_ns == mtime  # not retrained
    assert "Nothing to be done" in _mini(tmp_path, "-n")  # same bytes: its checksum, not its time
    _mini(tmp_path, "--config", "content=other")  # a base with other bytes
    dry = _mini(tmp_path, "-n", "--config", "content=other")
    assert "rule member:" in dry, dry  # retrains from the new base
