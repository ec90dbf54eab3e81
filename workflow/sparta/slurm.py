"""What a Slurm job of the workflow asks for: account and partition from the environment, and
retries that grow within the partition's limits.

A retry after a time or memory limit asks for more (time x attempt, memory x 1.5 per extra
attempt), never past the limit: ``SPARTA_SLURM_MAX_RUNTIME`` (minutes) and
``SPARTA_SLURM_MAX_MEM_MB`` when set, else, in a run that submits to Slurm, what ``scontrol
show partition`` reports for the job's partition (MaxTime, MaxMemPerNode). A first attempt
that already asks for more stops the run before any job is submitted, naming the limit: the
environment's caps while the Snakefile is parsed, the partition's at the run's start
(:func:`check_first_attempts`, from the workflow's ``onstart``: Snakemake knows its executor
only once the run starts, after the Snakefile is read).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from functools import cache


class LimitError(ValueError):
    pass


@dataclass(frozen=True)
class Limits:
    runtime: int | None = None  # minutes
    mem_mb: int | None = None
    source: str = ""


def minutes(value: str) -> int | None:
    """A Slurm time (``MM``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``; UNLIMITED: None) in minutes."""
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        h, m, s = 0, parts[0], 0
    else:
        h, m, s = ([0] * (3 - len(parts)) + parts)[-3:]
    return int(days or 0) * 1440 + h * 60 + m + (1 if s else 0)


@cache
def partition_limits(partition: str | None) -> Limits:
    """MaxTime and MaxMemPerNode of ``partition`` (the default partition when None) as
    ``scontrol`` reports them; none where there is no scontrol or it does not answer."""
    if not shutil.which("scontrol"):
        return Limits()
    command = ["scontrol", "show", "partition", *([partition] if partition else [])]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return Limits()
    if not partition:  # the default partition's block
        out = next((b for b in out.split("\n\n") if "Default=YES" in b), "")
    fields = dict(re.findall(r"(\w+)=(\S+)", out))
    mem = fields.get("MaxMemPerNode", "UNLIMITED")
    name = fields.get("PartitionName", partition)
    return Limits(
        minutes(fields.get("MaxTime", "UNLIMITED")),
        int(mem) if mem.isdigit() else None,
        f"partition {name} (scontrol show partition)",
    )


def limits(partition: str | None, ask_slurm: bool = True, env=os.environ) -> Limits:
    """The caps of a job in ``partition``: the environment's, else (``ask_slurm``) the
    partition's."""
    found = partition_limits(partition) if ask_slurm else Limits()
    runtime, mem = env.get("SPARTA_SLURM_MAX_RUNTIME"), env.get("SPARTA_SLURM_MAX_MEM_MB")
    if runtime or mem:
        return Limits(
            int(runtime) if runtime else found.runtime,
            int(mem) if mem else found.mem_mb,
            "SPARTA_SLURM_MAX_RUNTIME / SPARTA_SLURM_MAX_MEM_MB",
        )
    return found


def job_resources(name: str, gpu: int, mem_mb: int, runtime: int, ask_slurm=False, env=os.environ) -> dict:
    """Snakemake resources of a job (``name`` for the messages): account and partition
    (``SPARTA_SLURM_PARTITION`` with GPUs, ``SPARTA_SLURM_CPU_PARTITION`` without), the GPU
    model, and memory and time that grow with the attempt within the caps. ``ask_slurm`` (a
    bool, or a callable asked per attempt): the partition's caps too, for a run on Slurm."""
    res: dict = {}
    partition = env.get("SPARTA_SLURM_PARTITION" if gpu else "SPARTA_SLURM_CPU_PARTITION") or None
    if env.get("SPARTA_SLURM_ACCOUNT"):
        res["slurm_account"] = env["SPARTA_SLURM_ACCOUNT"]
    if partition:
        res["slurm_partition"] = partition
    if gpu and env.get("SPARTA_SLURM_GPU_MODEL"):
        res["gpu_model"] = env["SPARTA_SLURM_GPU_MODEL"]
    asked = ask_slurm if callable(ask_slurm) else (lambda: ask_slurm)

    def cap() -> Limits:
        return limits(partition, bool(asked()), env)

    check_request(Request(name, partition, mem_mb, runtime), cap())

    # the first attempt asks for what the stage asks (check_first_attempts stops a run whose
    # first attempt is past the limit); retries grow within it
    def job_mem(wc, attempt):
        return mem_mb if attempt == 1 else _capped(int(mem_mb * (1 + 0.5 * (attempt - 1))), cap().mem_mb)

    def job_runtime(wc, attempt):
        return runtime if attempt == 1 else _capped(runtime * attempt, cap().runtime)

    res["mem_mb"], res["runtime"] = job_mem, job_runtime
    return res


@dataclass(frozen=True)
class Request:
    """A job's first attempt: what it asks of its partition (None: the cluster's default)."""

    name: str
    partition: str | None
    mem_mb: int
    runtime: int


def check_request(request: Request, cap: Limits) -> None:
    where = f"in {cap.source}" if cap.source else ""
    if cap.runtime is not None and request.runtime > cap.runtime:
        raise LimitError(
            f"{request.name} asks for {request.runtime} min, more than the limit of {cap.runtime} min "
            f"{where}: lower resources.*.runtime, or use a partition with a longer MaxTime"
        )
    if cap.mem_mb is not None and request.mem_mb > cap.mem_mb:
        raise LimitError(
            f"{request.name} asks for {request.mem_mb} MB, more than the limit of {cap.mem_mb} MB "
            f"{where}: lower resources.*.mem_mb, or use a partition with more memory per node"
        )


def first_attempts(workflow) -> list[Request]:
    """The :class:`Request` of every job the run is to submit (local jobs submit nothing): its
    first attempt's resources in Snakemake's plan at ``onstart``, a profile's ``set-resources``
    applied, named by its rule."""
    found = []
    for job in workflow.dag.needrun_jobs():
        if job.is_local:
            continue
        r = job.resources
        asked = (r.get("slurm_partition"), r.get("mem_mb"), r.get("runtime"))
        if None in asked[1:]:
            continue
        found.append(Request(f"rule {job.rule.name}", *asked))
    return found


def check_first_attempts(requests, env=os.environ) -> None:
    """Before any job of a run on Slurm: the first one whose first attempt is past its
    partition's limits (``scontrol``'s, or the environment's caps) raises LimitError."""
    for request in sorted(set(requests), key=lambda r: r.name):
        check_request(request, limits(request.partition, True, env))


def _capped(value: int, cap: int | None) -> int:
    return value if cap is None else min(value, cap)


def orphans(workdir: str, experiments, run=subprocess.run) -> list[tuple[str, str, str]]:
    """(job id, state, rule and wildcards) of this user's Slurm jobs still queued or running in
    ``workdir`` for one of ``experiments``: a snakemake of this folder submitted them and died
    (a live one holds the experiments' locks, so this process would not have started)."""
    if not shutil.which("squeue"):
        return []
    out = run(
        ["squeue", "--me", "--noheader", "--format=%i|%T|%Z|%k"], capture_output=True, text=True, timeout=60
    ).stdout
    here, found = os.path.realpath(workdir), []
    for line in out.splitlines():
        job, state, folder, comment = (line.split("|", 3) + ["", "", ""])[:4]
        wildcards = comment.partition("_wildcards_")[2]
        mine = any(wildcards == e or wildcards.startswith(f"{e}_") for e in experiments)
        if comment.startswith("rule_") and mine and os.path.realpath(folder) == here:
            found.append((job.strip(), state.strip(), comment.strip()))
    return found


def cancel_orphans(workdir: str, experiments, say=print, wait: float = 120, run=subprocess.run) -> list[str]:
    """Cancel :func:`orphans` and wait until Slurm has ended them, so that no two copies of a
    job ever write one file; their outputs, marked incomplete when they were submitted, are
    rerun (rerun-incomplete). Returns the cancelled job ids."""
    jobs = orphans(workdir, experiments, run)
    if not jobs:
        return []
    ids = [j for j, *_ in jobs]
    say(
        f"sparta: {len(jobs)} Slurm job(s) of an earlier snakemake of this folder are still queued or "
        f"running ({', '.join(f'{j} {s} {c}' for j, s, c in jobs)}): that snakemake is gone, so they "
        "are cancelled (never two copies writing one file) and their outputs rerun"
    )
    run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    deadline = time.time() + wait
    while time.time() < deadline and any(j in ids for j, *_ in orphans(workdir, experiments, run)):
        time.sleep(2)
    return ids
