"""A member on disk: ``member.json`` names its base model folder and its PEFT adapter.

``{"name", "base", "adapter"}``: ``base`` is a Hugging Face model folder, ``adapter`` a PEFT
adapter folder (or null: the base alone). Adapter paths inside the results folder are stored
relative to the ``member.json``, so a results folder can move. Pure: no model is loaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MemberSpec:
    name: str
    base: str
    adapter: str | None = None

    @classmethod
    def read(cls, path: str | os.PathLike) -> MemberSpec:
        path = Path(path)
        data = json.loads(path.read_text())
        adapter = data.get("adapter")
        if adapter is not None and not os.path.isabs(adapter):
            adapter = str((path.parent / adapter).resolve())
        return cls(name=data["name"], base=data["base"], adapter=adapter)

    def write(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        adapter = self.adapter
        if adapter is not None and Path(adapter).resolve().is_relative_to(path.parent.resolve()):
            adapter = os.path.relpath(Path(adapter).resolve(), path.parent.resolve())
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"name": self.name, "base": self.base, "adapter": adapter}, indent=2))
        os.replace(tmp, path)


def check_model_folder(path: str | os.PathLike, what: str = "model") -> Path:
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{what} folder {path} has no config.json: point it at a Hugging Face model folder"
        )
    return path


def check_adapter_folder(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"adapter folder {path} has no adapter_config.json (a PEFT adapter)")
    return path
