"""Every file a run writes follows the umask: a colleague reads a shared run's tables and loads
its members. Libraries write some files 0600 (safetensors' weights, mkstemp's temporary
files); sparta's writers give them the umask's modes (0644 and folders 0755 under umask 022)."""

import os
import stat

import pytest

from sparta import tables
from sparta.files import umask, write_folder

from .tiny import build_tiny_model


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(folder):
    return {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*")}


def test_umask_is_read_without_changing_it(umask_022):
    assert umask() == 0o022 and umask() == 0o022


def test_write_folder_replaces_the_folder_whole_with_the_umasks_modes(tmp_path, umask_022):
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "old.safetensors").write_bytes(b"old")  # an earlier version: gone afterwards

    def writer(tmp):
        save_file({"w": torch.zeros(2)}, tmp / "model.safetensors")  # safetensors writes 0600
        (tmp / "sub").mkdir(mode=0o700)
        (tmp / "sub/config.json").write_text("{}")

    assert write_folder(folder, writer) == folder
    assert _modes(folder) == {"model.safetensors": 0o644, "sub": 0o755, "sub/config.json": 0o644}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert not (tmp_path / "model.tmp").exists()

    def fails(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        write_folder(folder, fails)
    assert set(_modes(folder)) == {"model.safetensors", "sub", "sub/config.json"}  # untouched
    assert not (tmp_path / "model.tmp").exists()


def test_a_converted_base_can_be_read_by_everyone_under_umask_022(tmp_path, monkeypatch, umask_022):
    """The GGUF conversion (rule convert_gguf) on a tiny model standing in for the GGUF: its
    model.safetensors was 0600, so a colleague could read a shared run's tables but load no
    member."""
    from sparta import models

    tiny = build_tiny_model(tmp_path / "tiny")

    class NoGGUF:  # loads the tiny folder where the conversion reads the GGUF file
        def __init__(self, auto):
            self.auto = auto

        def from_pretrained(self, folder, gguf_file=None, **kwargs):
            return self.auto.from_pretrained(folder, **kwargs)

        def from_config(self, *args, **kwargs):
            return self.auto.from_config(*args, **kwargs)

    monkeypatch.setattr(models, "gguf_path", lambda package, filename: tiny / filename)
    monkeypatch.setattr(models, "AutoTokenizer", NoGGUF(models.AutoTokenizer))
    monkeypatch.setattr(models, "AutoModelForCausalLM", NoGGUF(models.AutoModelForCausalLM))
    out = models.convert_gguf("llm_tiny", "tiny.gguf", tmp_path / "results/_bases/tiny")
    modes = _modes(out)
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_a_table_is_written_with_the_umasks_mode(tmp_path, umask_022):
    path = tmp_path / "t.parquet"
    tables.write_atomic(path, lambda tmp: open(tmp, "wb").write(b"x"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
