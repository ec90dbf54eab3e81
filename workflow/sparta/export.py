"""Hand a member off: a checkpoint of a run as a PEFT adapter folder, or merged into its base
as a plain transformers model folder (sharded safetensors), with a model card (README.md,
with the Hugging Face metadata block) that says what it is and where it comes from.

    sparta export results/default --member adder --iteration 2 out/adder
    sparta export results/default --best arithmetic --merge out/best
    sparta export results/default --member adder out/adder --base-id ORG/NAME --push ORG/adder

The folder is self-contained: the adapter names its base by a hub id (the run's base when it
is one, or ``--base-id``) or by the base folder's absolute path, whose content digest is
recorded (``sparta_export.yaml``, the card), so it loads from any working directory. Files
are written with the modes the umask gives, like every other output.

A run folder copied out of its results folder finds its base on its own (:func:`find_base`:
the stored path, else ``_bases/<name>`` in the run or ``_bases/`` or ``results/_bases/`` in
a folder above it); ``--base FOLDER`` or ``--base ORG/NAME`` names it instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
from pathlib import Path

import yaml

from . import hub, layout, tables
from .files import follow_umask
from .members import MemberSpec, hub_name, is_hub_id
from .modelfiles import ModelFileError, gguf_path

SELECTION_STAGES = ("selected", "best final", "best initial")
PROPORTIONS = ("exact_match", "multiple_choice")
"""Metrics whose score is a share of examples right: these get a Wilson interval."""
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


# --- finding the member's base and adapter ---------------------------------------------------


def base_candidates(run: Path, stored: str) -> list[Path]:
    """Where a member's local base may be, in order: the path its member.json names, then a
    folder of that name in ``_bases/`` of the run and of every folder above it, or in
    ``results/_bases/`` beside one (a run folder copied out of ``results/``, with or without
    the converted bases)."""
    name = Path(stored).name
    found = [Path(stored)]
    for folder in [run.resolve(), *run.resolve().parents]:
        found += [folder / "_bases" / name, folder / layout.RESULTS / "_bases" / name]
    return found


def find_base(run: Path, stored: str) -> str | None:
    """The member's base: a hub id as it is, else the first model folder (one with a
    config.json) of :func:`base_candidates`; None when there is none."""
    if is_hub_id(stored):
        return stored
    for folder in base_candidates(run, stored):
        if (folder / "config.json").is_file():
            return str(folder)
    return None


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


def _with_files(run: Path, name: str, checkpoint: int, spec: MemberSpec, base: str | None) -> MemberSpec:
    """``spec`` with its base found (or ``base``, given), after checking its adapter is there."""
    member_json = layout.RunFolder(run).member_json(checkpoint, name)
    adapter = spec.adapter
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
    if base is not None:
        return MemberSpec(spec.name, given_base(base), adapter)
    found = find_base(run, spec.base)
    if found is None:
        raise ExportError(
            f"the base of {name}, {spec.base} ({member_json} names it), is not there, nor in a "
            f"_bases/ or results/_bases/ folder in or above {run}: name it with --base FOLDER "
            "(or --base ORG/NAME, a hub model)"
        )
    return MemberSpec(spec.name, found, adapter)


# --- what the folder records about its base --------------------------------------------------


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
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        lines.append(f"{rel.as_posix()}\0{h.hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def run_settings(run: Path) -> dict:
    path = layout.RunFolder(run).settings
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _gguf_facts(path: Path) -> dict:
    """License, organization, name and quantisation recorded inside a GGUF file (what is there)."""
    try:
        import gguf

        reader = gguf.GGUFReader(path)
    except Exception:  # no gguf package, or not readable: the card says less
        return {}
    facts = {}
    for key in ("license", "organization", "name", "basename", "size_label", "finetune"):
        field = reader.fields.get(f"general.{key}")
        if field is not None:
            facts[key] = str(field.contents())
    field = reader.fields.get("general.file_type")
    if field is not None:
        try:
            facts["quantization"] = gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_")
        except ValueError:
            pass
    return facts


def base_provenance(run: Path, base: str) -> dict:
    """Where a member's base comes from: ``{"kind": "gguf", package, version, file, ...}`` when
    the run converted it from a GGUF shipped in a package (results/_bases/<name>), ``{"kind":
    "hub", "id"}`` for a hub id, else ``{"kind": "folder"}``."""
    if is_hub_id(base):
        out = {"kind": "hub", "id": hub_name(base)}
        if base != out["id"]:
            out["reference"] = base  # hf://org/name[@revision], as the config named it
        return out
    folder = Path(base)
    spec = run_settings(run).get("base_models", {}).get(folder.name) or {}
    if folder.parent.name == "_bases" and spec.get("gguf_file"):
        out = {"kind": "gguf", "package": spec["gguf_package"], "file": spec["gguf_file"]}
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out["version"] = importlib.metadata.version(spec["gguf_package"])
        try:
            out.update(_gguf_facts(gguf_path(spec["gguf_package"], spec["gguf_file"])))
        except ModelFileError:  # the package is gone since the run: the card says less
            pass
        return out
    return {"kind": "folder"}


def base_license(base: str, provenance: dict) -> str | None:
    """The base's license if it is known: its README's metadata block (a hub snapshot), or the
    GGUF it was converted from."""
    readme = Path(base) / "README.md"
    if not is_hub_id(base) and readme.is_file():
        text = readme.read_text(errors="replace")
        if text.startswith("---"):
            with contextlib.suppress(yaml.YAMLError, IndexError):
                meta = yaml.safe_load(text.split("---", 2)[1]) or {}
                if isinstance(meta, dict) and meta.get("license"):
                    return str(meta["license"])
    return provenance.get("license")


# --- what the card says about the member -----------------------------------------------------


def wilson(score: float, n: int, metric: str) -> tuple[float, float] | None:
    """95% Wilson interval of a proportion score over n examples (None: not a proportion)."""
    if metric not in PROPORTIONS or not n:
        return None
    from .metrics import wilson_interval

    return wilson_interval(round(score * n), int(n))


def scores_of(run: Path, name: str, checkpoint: int) -> list[dict]:
    """The member's evaluation scores: task, metric, split, score, n, 95% interval."""
    path = layout.RunFolder(run).at(layout.evaluation_file, layout.SCORES)
    if not path.exists():
        return []
    scores = tables.read(path, "scores")
    mine = scores[(scores["member"] == name) & (scores["checkpoint"] == checkpoint)]
    rows = []
    for r in mine.sort_values(["task", "split"], ascending=[True, False]).itertuples(index=False):
        rows.append(
            {
                "task": r.task,
                "metric": r.metric,
                "split": r.split,
                "score": float(r.score),
                "n": int(r.n),
                "interval": wilson(float(r.score), int(r.n), r.metric),
            }
        )
    return rows


def selections_of(run: Path, name: str, checkpoint: int) -> list[dict]:
    """The selection rows that picked this checkpoint (selected, best final, best initial), each
    with the number of candidates that tied with it on validation (1: no tie)."""
    folder = layout.RunFolder(run)
    sel_path = folder.at(layout.evaluation_file, layout.SELECTION)
    scores_path = folder.at(layout.evaluation_file, layout.SCORES)
    if not sel_path.exists():
        return []
    sel = tables.read(sel_path, "selection")
    picked = sel[(sel["member"] == name) & (sel["checkpoint"] == checkpoint)]
    if len(picked) == 0:
        return []
    val = None
    if scores_path.exists():
        scores = tables.read(scores_path, "scores")
        val = scores[scores["split"] == "validation"]
    select_from = (run_settings(run).get("evaluation") or {}).get("select_from", "all")
    out = []
    for r in picked.itertuples(index=False):
        tied = 1
        if val is not None:
            cand = val[val["task"] == r.task]
            last = cand["checkpoint"].max()
            if r.stage == "best initial":
                cand = cand[cand["checkpoint"] == 0]
            elif r.stage == "best final" or select_from == "final":
                cand = cand[cand["checkpoint"] == last]
            tied = max(1, int((cand["score"] == r.validation).sum()))
        out.append(
            {
                "task": r.task,
                "stage": r.stage,
                "validation": float(r.validation),
                "test": float(r.test),
                "tied": tied,
                "select_from": select_from,
            }
        )
    order = {s: i for i, s in enumerate(SELECTION_STAGES)}
    return sorted(out, key=lambda d: (d["task"], order.get(d["stage"], 9)))


def _stage_words(stage: str, select_from: str) -> str:
    return {
        "selected": "the run's selected member"
        + (
            " (best on validation among the final members)"
            if select_from == "final"
            else " (best on validation among every member of every checkpoint)"
        ),
        "best final": "the best final member on validation",
        "best initial": "the best member of the initial pool on validation",
    }.get(stage, stage)


def _fmt(x: float) -> str:
    return "n/a" if x != x else f"{x:.4f}"


def model_card(
    run: Path,
    spec: MemberSpec,
    checkpoint: int,
    merged: bool,
    base_ref: str,
    base_digest: str | None,
    hub_base: str | None,
    dtype: str | None = None,
) -> str:
    """README.md of an exported member: the Hugging Face metadata block, then what the member
    is, its base and where that comes from, its evaluation scores, how to load it, and the
    run's settings."""
    settings = run_settings(run)
    provenance = base_provenance(run, spec.base)
    license_ = base_license(spec.base, provenance)
    method = settings.get("method", "sparta")
    metadata = _card_metadata(settings, spec, checkpoint, merged, hub_base, license_)
    lines = [
        "---",
        metadata,
        "---",
        "",
        f"# {spec.name} (iteration {checkpoint}) from the sparta run `{run.resolve().name}`",
        "",
        "A member of a pool of language models aligned with Sparta Alignment (collective",
        "alignment through combat: the members answer prompts, judge each other's answers, and",
        f"train with DPO on the winners' answers), exported by `sparta export`. Method: {method}.",
        *_what_it_is(run, settings, spec, checkpoint, merged, dtype),
        *_base_section(spec, provenance, license_, merged, base_ref, base_digest, hub_base),
        *_evaluation_section(scores_of(run, spec.name, checkpoint)),
        *_use_section(settings.get("system_prompt"), merged or spec.adapter is None),
    ]
    if settings:
        lines += [
            "",
            "## Settings of the run",
            "",
            "```yaml",
            yaml.safe_dump(settings, sort_keys=False).rstrip(),
            "```",
        ]
    return "\n".join(lines) + "\n"


def _card_metadata(
    settings: dict,
    spec: MemberSpec,
    checkpoint: int,
    merged: bool,
    hub_base: str | None,
    license_: str | None,
) -> str:
    """The card's Hugging Face metadata block (YAML): base, relation, license, library, tags."""
    from huggingface_hub import ModelCardData

    method = settings.get("method", "sparta")
    tags = ["sparta", "sparta-alignment"]
    tags += ["dpo"] if checkpoint > 0 else []
    tags += [method] if method != "sparta" else []
    tags += ["lora"] if spec.adapter is not None else []
    tags += ["merged"] if merged else ["peft"] if spec.adapter is not None else []
    tags += ["trl", "text-generation"]
    prompts = (settings.get("prompts") or {}).get("file")
    data = ModelCardData(
        base_model=hub_base,
        base_model_relation=None if hub_base is None else ("finetune" if merged else "adapter"),
        license=license_,
        library_name="transformers" if merged or spec.adapter is None else "peft",
        pipeline_tag="text-generation",
        tags=tags,
        datasets=[prompts] if isinstance(prompts, str) and is_hub_id(prompts) else None,
    )
    return data.to_yaml().rstrip()


def _what_it_is(
    run: Path, settings: dict, spec: MemberSpec, checkpoint: int, merged: bool, dtype: str | None
) -> list[str]:
    """The card's "What it is": run, member, checkpoint, form, and the selections that picked it."""
    form = (
        f"merged into its base (plain transformers model, {dtype})"
        if merged
        else "PEFT LoRA adapter"
        if spec.adapter is not None
        else "its base alone"
    )
    lines = [
        "",
        "## What it is",
        "",
        f"- run: `{run.resolve()}` (experiment `{settings.get('experiment', run.name)}`)",
        f"- member: `{spec.name}`, checkpoint {checkpoint} (0 = the initial pool, t = after iteration t"
        f" of {settings.get('iterations', '?')})",
        "- form: " + form,
    ]
    picked = selections_of(run, spec.name, checkpoint)
    for s in picked:
        tie = (
            f"; a {s['tied']}-way tie on validation, broken by the earliest checkpoint, then the"
            " member's name"
            if s["tied"] > 1
            else "; no tie on validation"
        )
        lines.append(
            f"- task {s['task']}: {_stage_words(s['stage'], s['select_from'])}, validation "
            f"{_fmt(s['validation'])}, test {_fmt(s['test'])}{tie}"
        )
    if not picked and layout.RunFolder(run).at(layout.evaluation_file, layout.SELECTION).exists():
        lines.append("- not the evaluation's selection for any task (exported by name)")
    return lines


def _base_section(
    spec: MemberSpec,
    provenance: dict,
    license_: str | None,
    merged: bool,
    base_ref: str,
    base_digest: str | None,
    hub_base: str | None,
) -> list[str]:
    """The card's "Base model": where the base comes from, its digest and license, and what the
    adapter names as its base."""
    lines = ["", "## Base model", ""]
    if provenance["kind"] == "hub":
        lines.append(f"- the hub model `{provenance['id']}`")
    else:
        lines.append(f"- folder: `{Path(spec.base).resolve()}`")
        if base_digest:
            lines.append(
                f"- content digest (sha256 over the folder's files, as `sparta_export.yaml`): `{base_digest}`"
            )
    if provenance["kind"] == "gguf":
        lines.append(_gguf_words(provenance))
    if license_:
        lines.append(f"- license of the base: {license_}")
    if not merged and spec.adapter is not None:
        lines.append(f"- the adapter's `base_model_name_or_path`: `{base_ref}`")
        if hub_base is not None and provenance["kind"] != "hub":
            lines.append(
                f"- `{hub_base}` was named by the exporter (`--base-id`); the member was trained on the"
                " folder above, which may differ from it (see the digest)"
            )
    return lines


def _gguf_words(provenance: dict) -> str:
    """The line on a base converted from a GGUF file: which file, which quantisation of what."""
    version = f" {provenance['version']}" if provenance.get("version") else ""
    quant = provenance.get("quantization", "quantized")
    who = " ".join(
        str(provenance[k]) for k in ("organization", "basename", "size_label") if provenance.get(k)
    )
    return (
        f"- converted by sparta from the GGUF file `{provenance['file']}` of the Python package"
        f" `{provenance['package']}`{version}: a {quant} quantisation"
        + (f" of {who}" if who else "")
        + ", dequantized to float32. It is not the original (unquantized) hub model of that name;"
        " the member was trained on these dequantized weights."
    )


def _evaluation_section(scores: list[dict]) -> list[str]:
    """The card's "Evaluation" table (nothing when the run has no scores for the member)."""
    if not scores:
        return []
    lines = [
        "",
        "## Evaluation",
        "",
        "Scores of this checkpoint in the run's evaluation; 95% Wilson interval for scores that are"
        " a share of examples right.",
        "",
        "| task | metric | split | score | 95% interval | n |",
        "|---|---|---|---|---|---|",
    ]
    for r in scores:
        iv = "" if r["interval"] is None else f"{r['interval'][0]:.4f} to {r['interval'][1]:.4f}"
        lines.append(f"| {r['task']} | {r['metric']} | {r['split']} | {_fmt(r['score'])} | {iv} | {r['n']} |")
    return lines


def _use_section(system: str | None, plain: bool) -> list[str]:
    """The card's "Use": the system prompt it was trained with and how to load it (``plain``: a
    transformers model, else a PEFT adapter)."""
    lines = ["", "## Use", ""]
    if system:
        lines += [f"The member was trained and evaluated with the system prompt {json.dumps(system)}.", ""]
    auto = "AutoModelForCausalLM" if plain else "AutoPeftModelForCausalLM"
    package = "transformers" if plain else "peft"
    loader = f"from {package} import {auto}\n\nmodel = {auto}.from_pretrained(FOLDER)"
    return lines + ["```python", loader, "```"]


# --- writing the folder ----------------------------------------------------------------------


def merge_dtype(run: Path, dtype: str | None):
    """The dtype of a merged export: ``dtype``, or the run's (settings.yaml), resolved as
    sparta resolves it on this machine (auto: bf16 on a GPU that has it, fp32 on CPU)."""
    import torch

    from .models import pick_device, pick_dtype

    settings = run_settings(run)
    device = pick_device(settings.get("device", "auto"))
    if device.type == "cuda" and not torch.cuda.is_available():
        device = torch.device("cpu")
    return pick_dtype(dtype or settings.get("dtype", "auto"), device)


def merge_into_base(base: str, adapter: str | None, dtype):
    """The base with the adapter merged into its weights in place (PEFT's merge_and_unload):
    one copy of the weights in memory, on CPU."""
    from .models import load_base, pick_device

    model = load_base(base, pick_device("cpu"), dtype)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model


@contextlib.contextmanager
def hub_online():
    """Lift offline mode (HF_HUB_OFFLINE=1, as in every job) for an upload the user asked for."""
    from huggingface_hub import constants

    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = was


def push(out: Path, repo_id: str, private: bool = False) -> str:
    """Upload an exported folder to the hub repository ``repo_id`` (created if needed; needs
    the network and a token: ``hf auth login`` or HF_TOKEN). Returns the commit's URL."""
    from huggingface_hub import HfApi

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


def _check_empty(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file: export writes a folder, choose a new folder")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty: choose a new folder")


def _make_folder(out: Path) -> None:
    """Create ``out`` and write a file into it, so a folder we cannot write stops the export
    before any model is loaded."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".sparta-write-check"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise ExportError(f"cannot write {out}: {e.strerror or e}; choose a folder you can write") from None


def _chosen(
    run: Path, member: str | None, iteration: int | None, best: str | None, merge: bool, base: str | None
) -> tuple[str, int, MemberSpec]:
    """The member and checkpoint to export (:func:`choose`) and its spec, its adapter checked
    and its base found (or ``base``, given); a base alone only merged."""
    name, checkpoint = choose(run, member, iteration, best)
    spec = MemberSpec.read(layout.RunFolder(run).member_json(checkpoint, name))
    if not merge and spec.adapter is None:
        raise ExportError(f"{name} at iteration {checkpoint} is its base alone (no adapter): use --merge")
    return name, checkpoint, _with_files(run, name, checkpoint, spec, base)


def _local_folders(run: Path, spec: MemberSpec) -> tuple[str, str | None]:
    """The base's and the adapter's folders on this machine: an hf:// id's snapshot folder in
    the Hugging Face cache, at the run's manifest commit (a one-line error when it is not there)."""
    manifest = hub.find_manifest(run)
    try:
        return hub.local(spec.base, manifest), hub.local(spec.adapter, manifest)
    except hub.HubError as e:
        raise ExportError(str(e)) from None


def _write_model(
    run: Path,
    out: Path,
    folders: tuple[str, str | None],
    merge: bool,
    base_ref: str,
    dtype: str | None,
    max_shard_size: str | int,
) -> str | None:
    """The weights (merged, or the adapter's files) and the tokenizer, written into ``out``
    from the base's and the adapter's local ``folders``; returns the merged weights' dtype name
    (None for an adapter)."""
    from .models import load_tokenizer

    base_folder, adapter_folder = folders
    tok = load_tokenizer(base_folder)
    if merge:
        dtype_name = _write_merged(run, out, base_folder, adapter_folder, dtype, max_shard_size)
    else:
        dtype_name = None
        _write_adapter(out, adapter_folder, base_ref)
    tok.padding_side = "right"
    tok.save_pretrained(out)
    return dtype_name


def _write_merged(
    run: Path, out: Path, base: str, adapter: str | None, dtype: str | None, max_shard_size: str | int
) -> str:
    """The base with the adapter merged, saved into ``out``; returns the dtype's name."""
    torch_dtype = merge_dtype(run, dtype)
    model = merge_into_base(base, adapter, torch_dtype)
    model.save_pretrained(out, max_shard_size=max_shard_size)
    del model
    return str(torch_dtype).removeprefix("torch.")


def _write_adapter(out: Path, adapter: str, base_ref: str) -> None:
    """The adapter's files copied into ``out``, its config naming ``base_ref`` as its base."""
    for f in Path(adapter).iterdir():
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    config_path = out / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = base_ref
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def export(
    run: str | Path,
    out: str | Path,
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
    _check_empty(out)
    local = not is_hub_id(spec.base)
    base_ref = hub_base or str(Path(spec.base).resolve())
    digest = folder_digest(spec.base) if local else None
    folders = _local_folders(run, spec)
    _make_folder(out)
    dtype_name = _write_model(run, out, folders, merge, base_ref, dtype, max_shard_size)
    (out / "README.md").write_text(
        model_card(run, spec, checkpoint, merge, base_ref, digest, hub_base, dtype_name)
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
    result = {
        "member": name,
        "checkpoint": checkpoint,
        "merged": merge,
        "out": str(out.resolve()),
        "base": record["base"],
        "base_model_name_or_path": record["base_model_name_or_path"],
        "base_sha256": digest,
        "dtype": dtype_name,
    }
    if push_to is not None:
        result["pushed"] = push(out, push_to, private)
    return result
