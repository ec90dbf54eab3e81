"""Hand a member off: a checkpoint of a run as a PEFT adapter folder, or merged into its base
as a plain transformers model folder (sharded safetensors), with a model card (README.md,
with the Hugging Face metadata block) that says what it is and where it comes from
(docs/guides/handoff.md).

The folder is self-contained: the adapter names its base by a hub id (the run's base when it
is one, or ``--base-id``) or by the base folder's absolute path, whose content digest is
recorded (``sparta_export.yaml``, the card), so it loads from any working directory. Files
are written with the modes the umask gives, like every other output. A run folder copied out
of its results folder finds its base on its own (:func:`find_base`); ``--base`` names it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

import yaml
from huggingface_hub import HfApi, constants

from . import hub, layout, tables
from .chat import load_tokenizer
from .files import follow_umask
from .members import MemberSpec, hub_name, is_hub_id
from .model_card import Written, base_provenance, model_card, run_settings

DTYPES = ("auto", "float32", "bfloat16", "float16")


class ExportError(ValueError):
    pass


def choose(run: Path, member: str | None, iteration: int | None, best: str | None) -> tuple[str, int]:
    """(member, checkpoint) to export: the member's given iteration (default: the last one),
    or the member the evaluation selected on validation for task ``best`` (the ``selected``
    stage of the selection; ``best final`` in runs from before it existed)."""
    if best is not None:
        path = layout.RunFolder(run).at(layout.evaluation_file, layout.SELECTION)
        if not path.exists():
            raise ExportError(f"--best needs the evaluation's selection ({path}): run the evaluation first")
        selection = tables.read(path, "selection")
        stage = "selected" if (selection["stage"] == "selected").any() else "best final"  # older runs
        rows = selection[(selection["task"] == best) & (selection["stage"] == stage)]
        if len(rows) == 0:
            raise ExportError(f"no task {best!r} in {path}; tasks: {sorted(set(selection['task']))}")
        chosen = str(rows["member"].iloc[0])
        if member is not None and member != chosen:
            raise ExportError(f"--best {best} selected {chosen}, not {member}: drop --member")
        return chosen, int(rows["checkpoint"].iloc[0])
    if member is None:
        raise ExportError("give --member (and optionally --iteration), or --best TASK")
    found = layout.RunFolder(run).checkpoints(member)
    if not found:
        raise ExportError(f"no member {member!r} in {run}")
    if iteration is None:
        return member, found[-1]
    if iteration not in found:
        raise ExportError(f"member {member} has no checkpoint {iteration} in {run}; it has {found}")
    return member, iteration


def find_base(run: Path, stored: str) -> str | None:
    """The member's base: a hub id as it is, else the first model folder (one with a
    config.json) of, in order, the path its member.json names, then a folder of that name in
    ``_bases/`` of the run and of every folder above it, or in ``results/_bases/`` beside one (a
    run folder copied out of ``results/``, with or without the converted bases); None when there
    is none."""
    if is_hub_id(stored):
        return stored
    name = Path(stored).name
    found = [Path(stored)]
    for folder in [run.resolve(), *run.resolve().parents]:
        found += [folder / "_bases" / name, folder / layout.RESULTS / "_bases" / name]
    return next((str(folder) for folder in found if (folder / "config.json").is_file()), None)


def given_base(value: str) -> str:
    """``--base``: a model folder (absolute), or a hub id as an ``hf://`` id (looked up in the
    Hugging Face cache, as the run's hub bases are)."""
    if Path(value).is_dir():
        if not (Path(value) / "config.json").is_file():
            raise ExportError(f"--base {value} is not a model folder (no config.json): name a model folder")
        return str(Path(value).resolve())
    if is_hub_id(value):
        return value if value.startswith(hub.PREFIX) else hub.PREFIX + value
    raise ExportError(f"--base {value}: no such folder, and not a hub id (ORG/NAME)")


def folder_digest(folder: str | os.PathLike) -> str:
    """Content digest of a model folder: sha256 over ``<relative path>\\0<sha256 of the file>\\n``
    of every file, in sorted order (hidden files and folders left out). Two folders with the
    same files give the same digest wherever they lie."""
    folder = Path(folder)
    lines = []
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder)
        if not f.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        with open(f, "rb") as fh:
            lines.append(f"{rel.as_posix()}\0{hashlib.file_digest(fh, 'sha256').hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


@contextlib.contextmanager
def hub_online():
    """Lift offline mode (HF_HUB_OFFLINE=1, as in every job) for an upload the user asked for."""
    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = was


def push(out: Path, repo_id: str, private: bool = False) -> str:
    """Upload an exported folder to the hub repository ``repo_id`` (created if needed; needs
    the network and a token: ``hf auth login`` or HF_TOKEN). Returns the commit's URL."""
    with hub_online():
        api = HfApi()
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(out),
            repo_type="model",
            commit_message=f"sparta export: {out.name}",
        )
    return str(getattr(info, "commit_url", info))


def _check_arguments(run: Path, base_id: str | None, push_to: str | None, dtype: str | None) -> None:
    """Stop on a folder that is no run, a hub id that is none, or an unknown dtype."""
    if not layout.RunFolder(run).is_run():
        first = layout.iteration_name(0)
        raise ExportError(f"{run} is not a run folder (no {first}/ inside; expected results/<experiment>)")
    for what, value in (("--base-id", base_id), ("--push", push_to)):
        if value is not None and not is_hub_id(value):
            raise ExportError(f"{what} {value!r} is not a hub id (ORG/NAME)")
    if dtype is not None and dtype not in DTYPES:
        raise ExportError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")


def _chosen(
    run: Path, member: str | None, iteration: int | None, best: str | None, merge: bool, base: str | None
) -> tuple[str, int, MemberSpec]:
    """The member and checkpoint to export (:func:`choose`) and its spec, its adapter checked
    and its base found (or ``base``, given); a base alone only merged."""
    name, checkpoint = choose(run, member, iteration, best)
    member_json = layout.RunFolder(run).member_json(checkpoint, name)
    spec = MemberSpec.read(member_json)
    adapter = spec.adapter
    if not merge and adapter is None:
        raise ExportError(f"{name} at iteration {checkpoint} is its base alone (no adapter): use --merge")
    if (
        adapter is not None
        and not hub.is_ref(adapter)
        and not (Path(adapter) / "adapter_config.json").is_file()
    ):
        gone = "is gone" if not Path(adapter).exists() else "holds no adapter_config.json"
        raise ExportError(
            f"the adapter of {name} at iteration {checkpoint}, {adapter}, {gone} ({member_json} "
            "names it): copy it back from the original run, or export another checkpoint"
        )
    found = given_base(base) if base is not None else find_base(run, spec.base)
    if found is None:
        raise ExportError(
            f"the base of {name}, {spec.base} ({member_json} names it), is not there, nor in a "
            f"_bases/ or results/_bases/ folder in or above {run}: name it with --base FOLDER "
            "(or --base ORG/NAME, a hub model)"
        )
    return name, checkpoint, MemberSpec(spec.name, found, adapter)


def _write_model(
    run: Path, out: Path, spec: MemberSpec, base_ref: str, *, merge: bool, dtype: str | None, max_shard_size
) -> str | None:
    """The weights (merged, or the adapter's files) and the tokenizer, written into ``out`` (made
    here, once the base's and the adapter's folders are found on this machine: an hf:// id's
    snapshot in the Hugging Face cache, at the run's manifest commit); returns the merged
    weights' dtype name (None for an adapter)."""
    manifest = hub.find_manifest(run)
    try:
        base_folder, adapter_folder = hub.local(spec.base, manifest), hub.local(spec.adapter, manifest)
    except hub.HubError as e:
        raise ExportError(str(e)) from None
    probe = out / ".sparta-write-check"  # a folder we cannot write stops before any model is loaded
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise ExportError(f"cannot write {out}: {e.strerror or e}; choose a folder you can write") from None
    tok = load_tokenizer(base_folder)
    dtype_name = None
    if merge:
        dtype_name = _write_merged(run, out, base_folder, adapter_folder, dtype, max_shard_size)
    else:
        _write_adapter(out, adapter_folder, base_ref)
    tok.padding_side = "right"
    tok.save_pretrained(out)
    return dtype_name


def _write_merged(
    run: Path, out: Path, base: str, adapter: str | None, dtype: str | None, max_shard_size: str | int
) -> str:
    """The base with the adapter merged into its weights in place (PEFT's merge_and_unload: one
    copy of the weights in memory, on CPU), saved into ``out``, in ``dtype`` or the run's
    (settings.yaml) resolved as sparta resolves it on this machine (auto: bf16 on a GPU that
    has it, fp32 on CPU); returns the dtype's name."""
    import torch

    from .models import load_base, pick_device, pick_dtype

    settings = run_settings(run)
    device = pick_device(settings.get("device", "auto"))
    if device.type == "cuda" and not torch.cuda.is_available():
        device = torch.device("cpu")
    torch_dtype = pick_dtype(dtype or settings.get("dtype", "auto"), device)
    model = load_base(base, pick_device("cpu"), torch_dtype)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.save_pretrained(out, max_shard_size=max_shard_size)
    return str(torch_dtype).removeprefix("torch.")


def _write_adapter(out: Path, adapter: str, base_ref: str) -> None:
    """The adapter's files copied into ``out``, its config naming ``base_ref`` as its base."""
    for f in Path(adapter).iterdir():
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    config_path = out / "adapter_config.json"
    config = {**json.loads(config_path.read_text()), "base_model_name_or_path": base_ref}
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def export(
    run: str | Path,
    out: str | Path,
    *,
    member: str | None = None,
    iteration: int | None = None,
    best: str | None = None,
    merge: bool = False,
    base_id: str | None = None,
    dtype: str | None = None,
    max_shard_size: str | int = "2GB",
    push_to: str | None = None,
    private: bool = False,
    base: str | None = None,
) -> dict:
    """Write the chosen checkpoint to ``out`` (and upload it to ``push_to``); returns what was
    written. ``base``: the member's base (a model folder or a hub id) instead of the one its
    member.json names (:func:`find_base`)."""
    run, out = Path(run), Path(out)
    _check_arguments(run, base_id, push_to, dtype)
    name, checkpoint, spec = _chosen(run, member, iteration, best, merge, base)
    hub_base = base_id or hub_name(spec.base)
    if push_to is not None and not merge and hub_base is None:
        raise ExportError(
            "an adapter on the hub must name a public base: give --base-id ORG/NAME (or --merge)"
        )
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file: export writes a folder, choose a new folder")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty: choose a new folder")
    local = not is_hub_id(spec.base)
    base_ref = hub_base or str(Path(spec.base).resolve())
    digest = folder_digest(spec.base) if local else None
    dtype_name = _write_model(
        run, out, spec, base_ref, merge=merge, dtype=dtype, max_shard_size=max_shard_size
    )
    (out / "README.md").write_text(
        model_card(run, spec, checkpoint, Written(merge, base_ref, digest, hub_base, dtype_name))
    )
    record = {
        "run": str(run.resolve()),
        "member": name,
        "checkpoint": checkpoint,
        "base": str(Path(spec.base).resolve()) if local else spec.base,
        "base_sha256": digest,
        "base_model_name_or_path": None if merge else base_ref,
        "base_id": hub_base,
        "base_provenance": base_provenance(run, spec.base),
        "merged": merge,
        "dtype": dtype_name,
    }
    (out / "sparta_export.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    follow_umask(out)
    result = {"member": name, "checkpoint": checkpoint, "merged": merge, "out": str(out.resolve())}
    result |= {k: record[k] for k in ("base", "base_model_name_or_path", "base_sha256", "dtype")}
    if push_to is not None:
        result["pushed"] = push(out, push_to, private)
    return result
