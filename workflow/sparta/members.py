"""A member: :class:`MemberSpec`, the one member type, in the config (an initial member) and
on disk (a checkpoint's ``member.json``: its base model and its PEFT adapter).

A ``member.json`` stores an adapter inside its folder, or a base inside the results root,
relative to its own folder, so a results folder copied or moved as a whole keeps working.
Pure: no model is loaded.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .fields import setting
from .hub import local
from .layout import RESULTS as RESULTS  # the results root (its owner: sparta.layout)

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def is_hub_id(base: str) -> bool:
    """A model on the Hugging Face hub: ``hf://org/name[@revision]`` (sparta.hub), or plain
    ``org/name`` that is not a local path."""
    if base.startswith("hf://"):
        return True
    return bool(_HUB_ID.fullmatch(base)) and not base.startswith(".") and not Path(base).exists()


def hub_name(base: str) -> str | None:
    """The hub's ``org/name`` of a hub id (see :func:`is_hub_id`), else None."""
    if not is_hub_id(base):
        return None
    return base.removeprefix("hf://").split("@", 1)[0]


def base_reference(base: str) -> str:
    """How a member names its base: a local folder as an absolute path, a hub id as it is."""
    return base if is_hub_id(base) else str(Path(base).resolve())


def _relative(target: str, start: Path) -> str:
    rel = os.path.relpath(Path(target).resolve(), start.resolve())
    return rel if rel.startswith("..") else os.path.join(".", rel)


@dataclass(frozen=True)
class MemberSpec:
    """A member. In the config (``members:``, an initial member): ``base`` names one of
    ``base_models`` (or is a model folder), ``adapter`` a PEFT adapter folder, ``sft_domain``
    the domain of the short SFT that makes it. As a checkpoint (``member.json``, what model
    jobs read): ``base`` is the model folder or hub id, ``adapter`` the adapter folder or
    None; ``sft_domain`` is not stored (None)."""

    name: str = setting(
        help="Unique member name (used in file names and tables).",
        schema={"pattern": "^[A-Za-z0-9][A-Za-z0-9_-]*$"},
    )
    base: str = setting(
        help="A key of base_models, a Hugging Face model folder, or a hub id hf://<org>/<name>[@<revision>]."
    )
    adapter: str | None = setting(
        None,
        help="PEFT adapter folder of the member, or a hub id hf://<org>/<name>[@<revision>] (null: the "
        "base alone).",
    )
    sft_domain: str | None = setting(
        None, help="Domain of the short LoRA SFT that creates the member (sft.data_dir/<domain>.jsonl)."
    )

    @classmethod
    def read(cls, path: str | os.PathLike) -> MemberSpec:
        """The member of a ``member.json``, every stored relative path resolved against the
        file's folder (an absolute base, a hub id, as stored)."""
        path = Path(path)
        data = json.loads(path.read_text())
        adapter = data.get("adapter")
        if adapter is not None and not os.path.isabs(adapter) and not adapter.startswith("hf://"):
            adapter = str((path.parent / adapter).resolve())
        base = data["base"]
        if base.startswith(("./", "../")):
            base = str((path.parent / base).resolve())
        return cls(name=data["name"], base=base, adapter=adapter)

    def write(self, path: str | os.PathLike, root: str | os.PathLike | None = None) -> None:
        """Write ``member.json`` atomically. ``root``: the results root; a local base inside it
        is stored relative to the file (the workflow's scripts pass :data:`RESULTS`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        adapter = self.adapter
        if (
            adapter is not None
            and not adapter.startswith("hf://")
            and Path(adapter).resolve().is_relative_to(path.parent.resolve())
        ):
            adapter = os.path.relpath(Path(adapter).resolve(), path.parent.resolve())
        base = self.base
        if (
            root is not None
            and not is_hub_id(base)
            and Path(base).resolve().is_relative_to(Path(root).resolve())
        ):
            base = _relative(base, path.parent)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"name": self.name, "base": base, "adapter": adapter}, indent=2))
        os.replace(tmp, path)


local_folder = local
"""A folder as a local path: an ``hf://`` hub id becomes its snapshot folder in the Hugging
Face cache, at the commit the hub manifest recorded (sparta.hub.local; never the network)."""


def check_model_folder(path: str | os.PathLike, what: str = "model") -> Path:
    path = Path(local_folder(path))
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{what} folder {path} has no config.json: point it at a Hugging Face model folder"
        )
    return path


def check_adapter_folder(path: str | os.PathLike) -> Path:
    """The adapter folder (a hub id resolved, :func:`local_folder`), checked."""
    path = Path(local_folder(path))
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"adapter folder {path} has no adapter_config.json (a PEFT adapter)")
    return path
