"""Integrity of a run's finished files: recorded when a job succeeds, checked when a run starts.

Snakemake notices a missing output, not a damaged one: a truncated table keeps its name and a
plain rerun says "Nothing to be done". So snakemake's main process records each output of a
job that succeeds (size, mtime, SHA-256) in ``.snakemake/sparta-integrity/<path>.json``
(:func:`record`), and at a run's start, dry runs included, checks every file of the target
(:func:`check`): a size that differs is damage; a time that differs is hashed, and damage when
the content differs. A Parquet table whose footer cannot be read is damaged with or without a
record; a finished file without one gets one. A damaged file is reported and its job forced
(as ``--forcerun <file>``), so it is rebuilt with everything that depends on it.

Cost: a ``stat`` and a small JSON read per file, plus a Parquet footer read per table; content
is hashed only for files whose time changed (and once, for files without a record).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from .internals import require

FOLDER = "sparta-integrity"  # under snakemake's persistence folder (.snakemake)


def sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def record_path(root: Path, path: str) -> Path:
    """Where the record of ``path`` is: by its path in the working directory (as Snakemake
    names it, so a results folder copied with its .snakemake keeps its records), else by its
    absolute path."""
    rel = os.path.normpath(path)
    if os.path.isabs(rel) or rel.startswith(".."):
        p = Path(os.path.abspath(path))
        rel = os.path.join("_absolute", p.relative_to(p.anchor))
    return root / FOLDER / f"{rel}.json"


def _read(root: Path, path: str) -> dict | None:
    try:
        rec = json.loads(record_path(root, path).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and {"size", "mtime_ns", "sha256"} <= rec.keys() else None


def _write(root: Path, path: str, rec: dict) -> None:
    target = record_path(root, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, target)


def record(root: Path, path: str, workdir: str | os.PathLike = ".") -> None:
    """Record a finished file: size, mtime and content hash (``path`` as Snakemake names it, in
    ``workdir``)."""
    try:
        full = os.path.join(workdir, path)
        st = os.stat(full)
        rec = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256(full)}
    except OSError:
        return
    _write(root, path, rec)


def damage(root: Path, path: str) -> str | None:
    """Why a finished file is damaged (None: it is not, or it is missing). A file without a
    record gets one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq

            pq.read_metadata(path)
        except Exception as e:  # a truncated or overwritten table: no footer
            return f"not a readable Parquet table ({str(e).splitlines()[0][:120]})"
    rec = _read(root, path)
    if rec is None:
        record(root, path)
        return None
    if st.st_size != rec["size"]:
        return f"{st.st_size} bytes, {rec['size']} when it was written"
    if st.st_mtime_ns != rec["mtime_ns"]:
        if sha256(path) != rec["sha256"]:
            return "its content changed since it was written"
        _write(root, path, {**rec, "mtime_ns": st.st_mtime_ns})
    return None


def check(root: Path, paths) -> tuple[list[str], list[str]]:
    """(damaged, missing) among ``paths``, each damaged one reported on stderr."""
    damaged, missing = [], []
    for path in dict.fromkeys(map(str, paths)):
        if not os.path.lexists(path):
            if _read(root, path) is not None:
                missing.append(path)
            continue
        why = damage(root, path)
        if why:
            damaged.append(path)
            print(f"sparta: damaged: {path}: {why}; it is rebuilt with what depends on it", file=sys.stderr)
    for path in missing:
        print(f"sparta: missing: {path}; it is rebuilt with what depends on it", file=sys.stderr)
    return damaged, missing


_state = {"damaged": set(), "installed": False}


def install(workflow, paths) -> None:
    """Check ``paths`` (the run's target) now and force the jobs of damaged ones when the DAG is
    built (see the module's doc). Only in snakemake's main process."""
    if not workflow.is_main_process:
        return
    from snakemake.dag import DAG

    if "forcefiles" not in DAG.__init__.__code__.co_varnames:
        lacks = "this snakemake's DAG takes no forcefiles"
        require("integrity", "through which sparta rebuilds a damaged file", lacks=lacks)
    root = Path(".snakemake").absolute()
    paths = list(dict.fromkeys(map(str, paths)))
    start = time.perf_counter()
    damaged, _ = check(root, paths)
    bench = os.environ.get("SPARTA_INTEGRITY_BENCH")  # benchmarks/bench_integrity.py
    if bench:
        Path(bench).write_text(json.dumps({"files": paths, "seconds": time.perf_counter() - start}))
    _state["damaged"].update(damaged)
    if _state["installed"]:
        return
    _state["installed"] = True
    original = DAG.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if _state["damaged"]:
            self.forcefiles.update(_state["damaged"])

    DAG.__init__ = __init__


def shared_bases(workflow, rules) -> None:
    """Jobs of ``rules`` (convert_gguf: a shared base) rerun without making the jobs that use
    their outputs rerun: Snakemake reruns everything downstream of a job that runs, so deleting
    ``results/_bases/<base>`` (a cache, to the eye) would retrain every member. While Snakemake
    decides what runs, these jobs are hidden from their consumers, which wait for a rebuilt base
    but rerun only for reasons of their own (such as a recorded checksum that differs), so a base
    rebuilt with the same bytes retrains nothing. Only in snakemake's main process."""
    if not workflow.is_main_process:
        return
    from snakemake.dag import DAG

    if not hasattr(DAG, "update_needrun"):
        lacks = "this snakemake's DAG has no update_needrun"
        require("integrity", "which sparta wraps so a rebuilt shared base retrains nothing", lacks=lacks)
    rules = set(rules)
    if _state.get("bases") is not None:
        _state["bases"] |= rules
        return
    _state["bases"] = rules
    original = DAG.update_needrun

    async def update_needrun(self, *args, **kwargs):
        depending = getattr(self, "depending", None)  # DAG.depending (docs: private APIs)
        if depending is None:  # renamed: this part is off, said once, never silently
            if not _state.get("said"):
                _state["said"] = True
                print(
                    "sparta: engine: Snakemake's DAG has no 'depending' (an internal): a shared base "
                    "rebuilt with the same bytes now reruns what depends on it",
                    file=sys.stderr,
                )
            return await original(self, *args, **kwargs)
        hidden = {}
        for job in [j for j in depending if getattr(j, "rule", None) and j.rule.name in _state["bases"]]:
            hidden[job] = depending.pop(job)
        try:
            return await original(self, *args, **kwargs)
        finally:
            for job, consumers in hidden.items():
                depending[job] = consumers

    DAG.update_needrun = update_needrun
