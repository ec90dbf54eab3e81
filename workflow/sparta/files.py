"""File modes of what sparta writes. Pure: no model, no heavy import.

Every file a run writes gets the mode a new file gets (0666 less the umask), every folder
0777 less the umask, so a colleague can read a shared run (with umask 022: 0644 and 0755).
Libraries do not always: safetensors writes its weights 0600, :func:`tempfile.mkstemp` makes
0600; the writers below give the umask's modes back."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def umask() -> int:
    """The process's umask (read without changing it for longer than the call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(folder: Path) -> None:
    """Give every file and folder under ``folder`` the mode a new one gets (copies keep
    theirs; libraries write some 0600)."""
    mask = umask()
    folder = Path(folder)
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def write_folder(folder: str | os.PathLike, writer: Callable[[Path], object]) -> Path:
    """``writer(tmp)`` fills a temporary folder beside ``folder`` that then takes its place
    whole (a killed job never leaves a folder that looks complete), with the umask's modes."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        writer(tmp)
        follow_umask(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder
