"""Logging for rule scripts: to the rule's log file and to stderr.

An exception that ends a script is written to the log file too (Snakemake shows a script's
traceback only on the console), so every failed job's log ends with its error.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time


def setup(log_path: str | None, threads: int | None = None) -> logging.Logger:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    sys.excepthook = _log_uncaught
    log = logging.getLogger("sparta")
    if threads:
        threads = fair_threads(int(threads), log)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        with contextlib.suppress(ImportError):
            import torch

            torch.set_num_threads(threads)
    return log


def fair_threads(threads: int, log: logging.Logger) -> int:
    """``threads``, less one for each of the job's cores that other programs keep busy over
    :data:`LOOK` seconds (``SPARTA_FAIR_THREADS=0``: ``threads`` as given). Beside a busy
    program, OpenMP threads spin at every barrier waiting for the one it holds off its core; one
    thread waits for nobody (docs/results.md, "A round under load")."""
    if threads < 2 or os.environ.get("SPARTA_FAIR_THREADS", "1") == "0":
        return threads
    if not hasattr(os, "sched_getaffinity"):  # not Linux (macOS): no per-core /proc to read
        return threads
    busy = busy_elsewhere()
    fair = max(1, min(threads, len(os.sched_getaffinity(0)) - math.floor(busy + 0.25)))
    if fair < threads:
        msg = "%d thread(s), not %d: other programs keep %.1f of the job's cores busy (SPARTA_FAIR_THREADS=0)"
        log.info(msg, fair, threads, busy)
    return fair


LOOK = 0.25  # seconds fair_threads watches the job's cores


def busy_elsewhere(seconds: float = LOOK) -> float:
    """Cores of this process's CPU set that other processes kept busy over ``seconds`` (Linux
    ``/proc``; 0 where it cannot be read)."""
    try:
        (busy0, total0, own0), _, (busy1, total1, own1) = _ticks(), time.sleep(seconds), _ticks()
    except (OSError, ValueError, IndexError):
        return 0.0
    share = (busy1 - busy0 - (own1 - own0)) / max(1, total1 - total0)
    return max(0.0, share * len(os.sched_getaffinity(0)))


def _ticks() -> tuple[int, int, int]:
    """CPU ticks of this process's CPUs (busy, all) and of this process itself."""
    mine = {f"cpu{n}" for n in os.sched_getaffinity(0)}
    with open("/proc/stat") as f:
        rows = [[int(t) for t in line.split()[1:9]] for line in f if line.split()[0] in mine]
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()
    idle = sum(r[3] + r[4] for r in rows)  # idle, iowait
    return sum(map(sum, rows)) - idle, sum(map(sum, rows)), int(own[11]) + int(own[12])


def _log_uncaught(kind, error, tb) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, tb)
        return
    log = logging.getLogger("sparta")
    log.critical("the job failed", exc_info=(kind, error, tb))
    hint = getattr(error, "hint", None)
    log.critical("error: %s%s", error, f"\nwhat to fix: {hint}" if hint else "")
    logging.shutdown()
