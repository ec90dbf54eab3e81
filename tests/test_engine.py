"""sparta.engine, the one seam between the workflow and Snakemake's internals: it lists its
changes and the Snakemake versions they were tested with, warns on any other version, and
``SPARTA_ENGINE=plain`` runs plain Snakemake. On a one-rule workflow each way: what keep and
integrity protect, and what plain Snakemake does instead (docs/development/engine.md); on the
tiny run: the same tables either way."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sparta import engine

from .workflow_helpers import REPO, run_snakemake, tiny_config, write_config

UNTESTED = "9.99.0"
# snakemake's command line, its version faked (an untested Snakemake, as the engine sees it)
FAKED = (
    "import sys, snakemake; snakemake.__version__ = sys.argv.pop(1); "
    "from snakemake.cli import main; sys.exit(main())"
)

MINI = """
import sys
sys.path.insert(0, {workflow!r})
from sparta import engine

engine.install(workflow, "mini", "experiment", target=["results/mini/out.txt"], run_dirs=["results/mini"])


rule make:
    output:
        "results/mini/out.txt",
    params:
        value=config.get("value", "first"),
    shell:
        "test {{params.value}} != fail && echo {{params.value}} > {{output}}"


onstart:
    engine.started(workflow)
"""


def _mini(tmp: Path, *extra: str, mode: str = "on", version: str | None = None):
    snakefile = tmp / "Snakefile"
    if not snakefile.exists():
        snakefile.write_text(MINI.format(workflow=str(REPO / "workflow")))
    start = [sys.executable, "-c", FAKED, version] if version else [sys.executable, "-m", "snakemake"]
    return subprocess.run(
        [*start, "-s", str(snakefile), "-d", str(tmp / "work"), "--cores", "1", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, engine.VARIABLE: mode},
    )


def test_describe_lists_every_change_and_the_tested_versions():
    proc = subprocess.run(
        [sys.executable, "-c", "import sparta.engine as e; print(e.describe())"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "workflow")},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"tested with Snakemake {', '.join(engine.TESTED)}" in proc.stdout
    assert "SPARTA_ENGINE=plain" in proc.stdout
    for patch in engine.PATCHES:
        assert f"\n{patch.name}\n  changes: {patch.changes}" in proc.stdout
    assert [p.name for p in engine.PATCHES] == ["planning", "locks", "keep", "integrity"]


def test_the_switch_takes_on_or_plain_and_names_both_otherwise(monkeypatch):
    for value, mode in (("", "on"), ("on", "on"), ("plain", "plain"), (" Plain ", "plain")):
        monkeypatch.setenv(engine.VARIABLE, value)
        assert engine.mode() == mode
    monkeypatch.setenv(engine.VARIABLE, "off")
    with pytest.raises(ValueError, match="use plain"):
        engine.mode()


def test_an_untested_snakemake_prints_what_may_not_hold(monkeypatch, tmp_path):
    """A faked Snakemake version: the warning names every change's protection and the switch,
    in the snakemake process itself; the tested version and the plain mode say nothing."""
    import snakemake

    monkeypatch.setattr(snakemake, "__version__", UNTESTED)
    warning = engine.version_warning(engine.snakemake_version())
    assert UNTESTED in warning and "SPARTA_ENGINE=plain" in warning
    for patch in engine.PATCHES:
        assert f"  {patch.name}: {patch.gives}" in warning
    assert engine.version_warning(engine.TESTED[0]) is None

    faked = _mini(tmp_path, "-n", version=UNTESTED)
    assert faked.returncode == 0, faked.stderr
    assert f"this is Snakemake {UNTESTED}. These protections may not hold here" in faked.stderr
    assert all(f"  {p.name}: " in faked.stderr for p in engine.PATCHES), faked.stderr
    tested = _mini(tmp_path, "-n")
    assert tested.returncode == 0 and "sparta: warning" not in tested.stderr, tested.stderr
    plain = _mini(tmp_path, "-n", mode="plain", version=UNTESTED)
    assert plain.returncode == 0 and "sparta: warning" not in plain.stderr, plain.stderr
    assert "SPARTA_ENGINE=plain: Snakemake runs unchanged" in plain.stderr


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["on", "plain"])
def test_what_keep_and_integrity_protect_and_plain_snakemake_loses(tmp_path, mode):
    """A finished output, then a rerun that fails (its param changed): the engine puts the
    finished file back, plain Snakemake has deleted it. A finished output damaged in place
    (other bytes, no input newer than it): the engine plans its job again, plain Snakemake
    says there is nothing to be done. Plain Snakemake leaves none of sparta's files."""
    out = tmp_path / "work" / "results" / "mini" / "out.txt"
    first = _mini(tmp_path, mode=mode)
    assert first.returncode == 0 and out.read_text() == "first\n", first.stderr
    failed = _mini(tmp_path, "--config", "value=fail", mode=mode)
    assert failed.returncode != 0
    assert out.exists() == (mode == "on"), failed.stderr
    if mode == "on":
        assert out.read_text() == "first\n"
    else:
        assert _mini(tmp_path, mode=mode).returncode == 0
    out.write_text("damaged, and longer than it was\n")
    planned = _mini(tmp_path, "-n", mode=mode)
    assert planned.returncode == 0, planned.stderr
    if mode == "on":
        assert f"damaged: {out.relative_to(tmp_path / 'work')}" in planned.stderr
        assert "rule make:" in planned.stdout
    else:
        assert "Nothing to be done" in planned.stdout + planned.stderr
        left = [p.name for p in (tmp_path / "work" / ".snakemake").iterdir() if p.name.startswith("sparta")]
        assert not left, left


# the trainer's wall-clock seconds: the only column of a run's tables that no seed fixes
TIMING = ["train_runtime"]


def _tables(work: Path) -> dict[str, pd.DataFrame]:
    tables = {}
    for path in sorted((work / "results").rglob("*.parquet")):
        df = pd.read_parquet(path)
        tables[str(path.relative_to(work))] = df.drop(columns=[c for c in TIMING if c in df.columns])
    return tables


@pytest.mark.slow
def test_the_tiny_run_gives_the_same_tables_on_plain_snakemake(run_a, tiny_base, tmp_path, monkeypatch):
    """The tiny run (run_a, the engine on) made again with SPARTA_ENGINE=plain up to its first
    iteration's trained members (the SFTs, combat, judging, aggregation, DPO; the half of the
    run that keeps CI short): every Parquet table it wrote is equal to run_a's (the trainer's
    runtime aside), and the plain run took no sparta lock and wrote no integrity record or
    set-aside file."""
    cfg = write_config(tmp_path, tiny_config(tiny_base))
    assert cfg.read_text() == (run_a[0].parent / "config.yaml").read_text()
    work = tmp_path / "work"
    monkeypatch.setenv(engine.VARIABLE, "plain")
    targets = ["results/tiny/iter_1/preferences.parquet"]
    targets += [f"results/tiny/iter_1/members/{m}/member.json" for m in ("ann", "bob", "cid")]
    proc = run_snakemake(work, cfg, *targets)
    assert "SPARTA_ENGINE=plain: Snakemake runs unchanged" in proc.stderr
    assert not [p.name for p in (work / ".snakemake").iterdir() if p.name.startswith("sparta")]
    plain, on = _tables(work), _tables(run_a[0])
    assert len(plain) > 10 and set(plain) <= set(on), sorted(set(plain) - set(on))
    assert any("training_log" in name for name in plain) and any("judgments" in name for name in plain)
    for name, table in plain.items():
        pd.testing.assert_frame_equal(table, on[name], obj=name)
