"""File modes of what sparta writes. Pure: no model, no heavy import."""

from __future__ import annotations

import os
from pathlib import Path


def umask() -> int:
    """The process's umask (read without changing it for longer than the call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(folder: Path) -> None:
    """Give every file and folder under ``folder`` the mode a new file gets (0666 and 0777 less
    the umask): libraries write some files 0600 through temporary files (safetensors' adapter
    weights among them), copies keep theirs. So a colleague can read a shared run."""
    mask = umask()
    folder = Path(folder)
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)
