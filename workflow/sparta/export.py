"""Hand a member off: a checkpoint of a run as a PEFT adapter folder, or merged into its base
as a plain transformers model folder (safetensors), with a model card (README.md) that says
where it comes from: run, member, iteration, evaluation scores, settings.

    sparta export results/default --member adder --iteration 2 out/adder
    sparta export results/default --best arithmetic --merge out/best
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from . import tables
from .members import MemberSpec


class ExportError(ValueError):
    pass


def choose(run: Path, member: str | None, iteration: int | None, best: str | None) -> tuple[str, int]:
    """(member, checkpoint) to export: the member's given iteration (default: the last one),
    or the member the evaluation selected on validation for task ``best``."""
    if best is not None:
        path = run / "evaluation" / "selection.parquet"
        if not path.exists():
            raise ExportError(f"--best needs the evaluation's selection ({path}): run the evaluation first")
        selection = tables.read(path, "selection")
        rows = selection[(selection["task"] == best) & (selection["stage"] == "best final")]
        if len(rows) == 0:
            raise ExportError(f"no task {best!r} in {path}; tasks: {sorted(set(selection['task']))}")
        chosen = str(rows["member"].iloc[0])
        if member is not None and member != chosen:
            raise ExportError(f"--best {best} selected {chosen}, not {member}: drop --member")
        return chosen, int(rows["checkpoint"].iloc[0])
    if member is None:
        raise ExportError("give --member (and optionally --iteration), or --best TASK")
    found = sorted(
        int(p.parent.parent.parent.name.split("_")[1])
        for p in run.glob(f"iter_*/members/{member}/member.json")
    )
    if not found:
        raise ExportError(f"no member {member!r} in {run}")
    if iteration is None:
        return member, found[-1]
    if iteration not in found:
        raise ExportError(f"member {member} has no checkpoint {iteration} in {run}; it has {found}")
    return member, iteration


def model_card(run: Path, spec: MemberSpec, checkpoint: int, merged: bool) -> str:
    lines = [
        f"# {spec.name} (iteration {checkpoint}) from the sparta run `{run.name}`",
        "",
        "Trained with Sparta Alignment (collective alignment of a pool of language models through combat),",
        "exported by `sparta export`.",
        "",
        f"- run: `{run.resolve()}`",
        f"- member: `{spec.name}`, checkpoint {checkpoint} (0 = the initial pool)",
        f"- base model: `{spec.base}`",
        f"- form: {'merged into the base (plain transformers model)' if merged else 'PEFT LoRA adapter'}",
    ]
    scores_path = run / "evaluation" / "scores.parquet"
    if scores_path.exists():
        scores = tables.read(scores_path, "scores")
        mine = scores[(scores["member"] == spec.name) & (scores["checkpoint"] == checkpoint)]
        if len(mine):
            table = mine.pivot_table(index=["task", "metric"], columns="split", values="score").reset_index()
            lines += ["", "## Evaluation", "", "| task | metric | validation | test |", "|---|---|---|---|"]
            for r in table.itertuples(index=False):
                d = r._asdict()
                lines.append(
                    f"| {d['task']} | {d['metric']} | {d.get('validation', float('nan')):.4f} | "
                    f"{d.get('test', float('nan')):.4f} |"
                )
    selection_path = run / "evaluation" / "selection.parquet"
    if selection_path.exists():
        sel = tables.read(selection_path, "selection")
        picked = sel[(sel["member"] == spec.name) & (sel["checkpoint"] == checkpoint)]
        for r in picked.itertuples(index=False):
            lines.append(f"\nSelected as the {r.stage} member for task {r.task} (best on validation).")
    settings = run / "settings.yaml"
    if settings.exists():
        lines += ["", "## Settings of the run", "", "```yaml", settings.read_text().rstrip(), "```"]
    return "\n".join(lines) + "\n"


def export(
    run: str | Path,
    out: str | Path,
    member: str | None = None,
    iteration: int | None = None,
    best: str | None = None,
    merge: bool = False,
) -> dict:
    """Write the chosen checkpoint to ``out``; returns what was written."""
    run, out = Path(run), Path(out)
    if not (run / "iter_0").is_dir():
        raise ExportError(f"{run} is not a run folder (no iter_0/ inside; expected results/<experiment>)")
    name, checkpoint = choose(run, member, iteration, best)
    spec = MemberSpec.read(run / f"iter_{checkpoint}" / "members" / name / "member.json")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty: choose a new folder")
    out.mkdir(parents=True, exist_ok=True)
    from .models import load_base, load_tokenizer, pick_device

    tok = load_tokenizer(spec.base)
    if merge:
        import torch

        model = load_base(spec.base, pick_device("cpu"), torch.float32)
        if spec.adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, spec.adapter).merge_and_unload()
        model.save_pretrained(out)
    else:
        if spec.adapter is None:
            raise ExportError(f"{name} at iteration {checkpoint} is its base alone (no adapter): use --merge")
        for f in Path(spec.adapter).iterdir():
            if f.is_file():
                shutil.copy2(f, out / f.name)
    tok.padding_side = "right"
    tok.save_pretrained(out)
    (out / "README.md").write_text(model_card(run, spec, checkpoint, merge))
    (out / "sparta_export.yaml").write_text(
        yaml.safe_dump(
            {
                "run": str(run.resolve()),
                "member": name,
                "checkpoint": checkpoint,
                "base": spec.base,
                "merged": merge,
            }
        )
    )
    return {"member": name, "checkpoint": checkpoint, "merged": merge, "out": str(out), "base": spec.base}
