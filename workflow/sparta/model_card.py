"""The model card (README.md) of an exported member: the Hugging Face metadata block, what
the member is and which selection picked it, its base and where that comes from (hub id,
folder digest, the GGUF file it was converted from), its evaluation scores with Wilson
intervals, how to load it, and the run's settings."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from huggingface_hub import ModelCardData

from . import layout, tables
from .members import MemberSpec, hub_name, is_hub_id
from .metrics import wilson_interval
from .modelfiles import ModelFileError, gguf_path

SELECTION_STAGES = ("selected", "best final", "best initial")
PROPORTIONS = ("exact_match", "multiple_choice")
"""Metrics whose score is a share of examples right: these get a Wilson interval."""


@dataclass(frozen=True)
class Written:
    """What an export wrote, as its card and ``sparta_export.yaml`` record it."""

    merged: bool
    base_ref: str
    """What the adapter names as its base (``base_model_name_or_path``)."""
    base_digest: str | None
    """The local base folder's content digest (None: a hub base)."""
    hub_base: str | None
    """The base's hub id, the card's ``base_model`` (None: not known)."""
    dtype: str | None = None
    """The merged weights' dtype (None: an adapter)."""


def run_settings(run: Path) -> dict:
    path = layout.RunFolder(run).settings
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _gguf_facts(path: Path) -> dict:
    """License, organization, name and quantisation recorded inside a GGUF file (what is there)."""
    try:
        import gguf  # optional: without it the card says less

        reader = gguf.GGUFReader(path)
    except Exception:  # no gguf package, or not readable: the card says less
        return {}
    keys = ("license", "organization", "name", "basename", "size_label", "finetune")
    facts = {
        k: str(reader.fields[f"general.{k}"].contents()) for k in keys if f"general.{k}" in reader.fields
    }
    field = reader.fields.get("general.file_type")
    if field is not None:
        with contextlib.suppress(ValueError):
            facts["quantization"] = gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_")
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
        with contextlib.suppress(ModelFileError):  # the package is gone since the run: the card says less
            out.update(_gguf_facts(gguf_path(spec["gguf_package"], spec["gguf_file"])))
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


def scores_of(run: Path, name: str, checkpoint: int) -> list[dict]:
    """The member's evaluation scores: task, metric, split, score, n, 95% interval."""
    path = layout.RunFolder(run).at(layout.evaluation_file, layout.SCORES)
    if not path.exists():
        return []
    scores = tables.read(path, "scores")
    mine = scores[(scores["member"] == name) & (scores["checkpoint"] == checkpoint)]
    rows = []
    for r in mine.sort_values(["task", "split"], ascending=[True, False]).itertuples(index=False):
        score, n = float(r.score), int(r.n)
        interval = wilson_interval(round(score * n), n) if r.metric in PROPORTIONS and n else None
        rows.append(dict(task=r.task, metric=r.metric, split=r.split, score=score, n=n, interval=interval))
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
    among = "the final members" if select_from == "final" else "every member of every checkpoint"
    return {
        "selected": f"the run's selected member (best on validation among {among})",
        "best final": "the best final member on validation",
        "best initial": "the best member of the initial pool on validation",
    }.get(stage, stage)


def _fmt(x: float) -> str:
    return "n/a" if x != x else f"{x:.4f}"


def model_card(run: Path, spec: MemberSpec, checkpoint: int, written: Written) -> str:
    """README.md of an exported member, its sections in the order the module's docstring lists them."""
    settings = run_settings(run)
    provenance = base_provenance(run, spec.base)
    license_ = base_license(spec.base, provenance)
    method = settings.get("method", "sparta")
    metadata = _card_metadata(settings, spec, checkpoint, written, license_)
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
        *_what_it_is(run, settings, spec, checkpoint, written),
        *_base_section(spec, provenance, license_, written),
        *_evaluation_section(scores_of(run, spec.name, checkpoint)),
        *_use_section(settings.get("system_prompt"), written.merged or spec.adapter is None),
    ]
    if settings:
        written_settings = yaml.safe_dump(settings, sort_keys=False).rstrip()
        lines += ["", "## Settings of the run", "", "```yaml", written_settings, "```"]
    return "\n".join(lines) + "\n"


def _card_metadata(
    settings: dict, spec: MemberSpec, checkpoint: int, written: Written, license_: str | None
) -> str:
    """The card's Hugging Face metadata block (YAML): base, relation, license, library, tags."""
    merged, hub_base = written.merged, written.hub_base
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


def _what_it_is(run: Path, settings: dict, spec: MemberSpec, checkpoint: int, written: Written) -> list[str]:
    """The card's "What it is": run, member, checkpoint, form, and the selections that picked it."""
    form = "PEFT LoRA adapter" if spec.adapter is not None else "its base alone"
    if written.merged:
        form = f"merged into its base (plain transformers model, {written.dtype})"
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
        tie = "; no tie on validation"
        if s["tied"] > 1:
            broken = "broken by the earliest checkpoint, then the member's name"
            tie = f"; a {s['tied']}-way tie on validation, {broken}"
        lines.append(
            f"- task {s['task']}: {_stage_words(s['stage'], s['select_from'])}, validation "
            f"{_fmt(s['validation'])}, test {_fmt(s['test'])}{tie}"
        )
    if not picked and layout.RunFolder(run).at(layout.evaluation_file, layout.SELECTION).exists():
        lines.append("- not the evaluation's selection for any task (exported by name)")
    return lines


def _base_section(spec: MemberSpec, provenance: dict, license_: str | None, written: Written) -> list[str]:
    """The card's "Base model": where the base comes from, its digest and license, and what the
    adapter names as its base."""
    hub_base = written.hub_base
    lines = ["", "## Base model", ""]
    if provenance["kind"] == "hub":
        lines.append(f"- the hub model `{provenance['id']}`")
    else:
        lines.append(f"- folder: `{Path(spec.base).resolve()}`")
        if written.base_digest:
            lines.append(
                "- content digest (sha256 over the folder's files, as `sparta_export.yaml`): "
                f"`{written.base_digest}`"
            )
    if provenance["kind"] == "gguf":
        lines.append(_gguf_words(provenance))
    if license_:
        lines.append(f"- license of the base: {license_}")
    if not written.merged and spec.adapter is not None:
        lines.append(f"- the adapter's `base_model_name_or_path`: `{written.base_ref}`")
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
