"""Logging for rule scripts: to the rule's log file and to stderr.

An exception that ends a script is written to the log file too (Snakemake shows a script's
traceback only on the console), so every failed job's log ends with its error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys


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
    if threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        with contextlib.suppress(ImportError):
            import torch

            torch.set_num_threads(int(threads))
    return logging.getLogger("sparta")


def _log_uncaught(kind, error, tb) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, tb)
        return
    log = logging.getLogger("sparta")
    log.critical("the job failed", exc_info=(kind, error, tb))
    hint = getattr(error, "hint", None)
    log.critical("error: %s%s", error, f"\nwhat to fix: {hint}" if hint else "")
    logging.shutdown()
