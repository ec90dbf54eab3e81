"""The finished parts of a long job, kept beside its outputs so that a retry after a Slurm time
limit, a requeue or a kill continues from the last finished part instead of starting over.

A job's progress folder is not one of its outputs: Snakemake neither removes it before a
rerun nor after a failure. It is keyed by the job's inputs (a fingerprint of what decides its
results: the members' checkpoints and adapter files, the settings), so a rerun on other inputs
starts afresh, and it is removed when the job's outputs are written. DPO keeps its trainer
saves the same way (sparta.train.progress); evaluation keeps one table per finished task.

Each attempt claims the folder when it starts (its host, process, Slurm job and start time in
``owner``). An attempt that finds the folder claimed by a later one (a copy that outlived its
time limit or its requeue beside the retry) stops at its next part or step with
:class:`Superseded`, before it writes: two copies never write one file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import time
from pathlib import Path

import pandas as pd

from .tables import write_raw

STAMP = "inputs.sha256"
OWNER = "owner"


class Superseded(RuntimeError):
    """A later attempt of the same job took over its progress folder."""


def guard(progress: Progress):
    """A trainer callback: :meth:`Progress.check` at every step (a step is far longer than the
    read)."""
    from transformers import TrainerCallback

    class Guard(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            progress.check()

    return Guard()


def adapter_stamp(folder: str | None) -> list:
    """What changes when an adapter folder is written again: each file's name, size and
    modification time (a retrained checkpoint at the same path is another input)."""
    if not folder or not os.path.isdir(folder):
        return [folder]
    return sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(folder).iterdir() if p.is_file()
    )


def file_stamp(path: str | os.PathLike) -> tuple:
    """An input file as a fingerprint sees it: its path, size and modification time."""
    st = os.stat(path)
    return (str(path), st.st_size, st.st_mtime_ns)


def run_parts(names: list[str], run, progress: Progress | None, say=None) -> list:
    """``run(i)`` for each part ``names[i]`` in order, each result (a DataFrame) kept in
    ``progress`` as it finishes; the parts an earlier attempt finished are read back instead."""
    results = []
    for i, name in enumerate(names):
        part = f"{i:03d}-{name}"
        kept = progress.get(part) if progress is not None else None
        if kept is None:
            kept = run(i)
            if progress is not None:
                progress.put(part, kept)
        elif say is not None:
            say(f"{name}: finished by an earlier attempt of this job (kept in {progress.folder})")
        results.append(kept)
    return results


class Progress:
    """Parts (tables) of a job's result, by name, in ``folder`` for these ``inputs``."""

    def __init__(self, folder: str | os.PathLike, inputs: list):
        self.folder = Path(folder)
        key = hashlib.sha256(repr(inputs).encode()).hexdigest()
        stamp = self.folder / STAMP
        if not (stamp.is_file() and stamp.read_text() == key):
            shutil.rmtree(self.folder, ignore_errors=True)
            for _ in range(3):  # another job's done() may remove the shared parent meanwhile
                with contextlib.suppress(FileNotFoundError):
                    self.folder.mkdir(parents=True)
                    break
            stamp.write_text(key)
        job = os.environ.get("SLURM_JOB_ID", "-")
        claim = f"host {socket.gethostname()} pid {os.getpid()} Slurm job {job}"
        claim += f" started {time.strftime('%Y-%m-%d %H:%M:%S')} ({time.time_ns()})"
        tmp = self.folder / f".{OWNER}.{os.getpid()}"
        tmp.write_text(claim)
        os.replace(tmp, self.folder / OWNER)
        self.claim = claim

    def _path(self, part: str) -> Path:
        return self.folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", part) + ".parquet")

    def get(self, part: str) -> pd.DataFrame | None:
        """The part a run before this one finished, or None."""
        path = self._path(part)
        return pd.read_parquet(path) if path.is_file() else None

    def put(self, part: str, frame: pd.DataFrame) -> None:
        """A finished part, written atomically (a kill leaves no part that looks finished)."""
        self.check()
        write_raw(frame, self._path(part))

    def parts(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.parquet"))

    def check(self) -> None:
        """Raise :class:`Superseded` when another attempt has claimed the folder since this one
        did (or finished and removed it): called before each part and the job's outputs."""
        try:
            now = (self.folder / OWNER).read_text()
        except OSError:
            now = "an attempt that finished and removed it"
        if now != self.claim:
            raise Superseded(
                f"{self.folder} was taken over by {now}: this attempt ({self.claim}) stops without writing"
            )

    def done(self) -> None:
        """The job's outputs are written: its progress is no longer needed."""
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # the shared .progress folder, once no job keeps any
            self.folder.parent.rmdir()
