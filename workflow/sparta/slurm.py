"""What a Slurm job of the workflow asks for: account and partition from the environment, and
retries that grow within the partition's limits.

A retry after a time or memory limit asks for more (time x attempt, memory x 1.5 per extra
attempt), never past the limit: ``SPARTA_SLURM_MAX_RUNTIME`` (minutes) and
``SPARTA_SLURM_MAX_MEM_MB`` when set, else (``ask_slurm``, not yet wired into the workflow)
what ``scontrol show partition`` reports for the job's partition (MaxTime, MaxMemPerNode). A
first attempt that already asks for more stops the run before any job is submitted, naming
the limit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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
    try:
        out = subprocess.run(
            ["scontrol", "show", "partition", *([partition] if partition else [])],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
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


def job_resources(
    name: str, gpu: int, mem_mb: int, runtime: int, ask_slurm: bool = False, env=os.environ
) -> dict:
    """Snakemake resources of a job (``name`` for the messages): account and partition for
    every job (``SPARTA_SLURM_PARTITION`` with GPUs, ``SPARTA_SLURM_CPU_PARTITION`` without),
    the GPU model with GPUs, and memory and time that grow with the attempt within the caps
    (``ask_slurm``: the partition's too, for a run that submits to Slurm)."""
    res: dict = {}
    partition = env.get("SPARTA_SLURM_PARTITION" if gpu else "SPARTA_SLURM_CPU_PARTITION") or None
    if env.get("SPARTA_SLURM_ACCOUNT"):
        res["slurm_account"] = env["SPARTA_SLURM_ACCOUNT"]
    if partition:
        res["slurm_partition"] = partition
    if gpu and env.get("SPARTA_SLURM_GPU_MODEL"):
        res["gpu_model"] = env["SPARTA_SLURM_GPU_MODEL"]
    cap = limits(partition, ask_slurm, env)
    where = f"in {cap.source}" if cap.source else ""
    if cap.runtime is not None and runtime > cap.runtime:
        raise LimitError(
            f"{name} asks for {runtime} min, more than the limit of {cap.runtime} min {where}: "
            f"lower resources.*.runtime, or use a partition with a longer MaxTime"
        )
    if cap.mem_mb is not None and mem_mb > cap.mem_mb:
        raise LimitError(
            f"{name} asks for {mem_mb} MB, more than the limit of {cap.mem_mb} MB {where}: "
            f"lower resources.*.mem_mb, or use a partition with more memory per node"
        )
    res["mem_mb"] = lambda wc, attempt: _capped(int(mem_mb * (1 + 0.5 * (attempt - 1))), cap.mem_mb)
    res["runtime"] = lambda wc, attempt: _capped(runtime * attempt, cap.runtime)
    return res


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
    import time

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
