"""Everything sparta changes in how Snakemake itself behaves, installed by one call.

Four modules replace or wrap Snakemake internals (:data:`PATCHES`; docs/development/engine.md
has one section per change: what Snakemake does without it, what goes wrong then, the test
that shows it). rules/common.smk installs them all with :func:`install` and, at a run's
start, calls :func:`started`. They were written and tested against the Snakemake versions in
:data:`TESTED`; on any other, :func:`install` says which protection may not hold. With
``SPARTA_ENGINE=plain`` nothing is changed and the workflow runs on plain Snakemake, with the
same results (tests/test_engine.py compares every table of a run made both ways)::

    python -c "import sparta.engine as e; print(e.describe())"
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

VARIABLE = "SPARTA_ENGINE"
MODES = ("on", "plain")
TESTED = ("9.27.1",)
"""The Snakemake versions these changes were written and tested against (requirements.txt)."""


@dataclass(frozen=True)
class Patch:
    name: str  # the module, sparta.engine.<name>
    changes: str  # what it changes in Snakemake
    why: str  # what goes wrong without it
    gives: str  # the protection (or speed) that may not hold on an untested Snakemake


PATCHES = (
    Patch(
        "planning",
        "snakemake.dag.OutputIndex (by an index on the outputs' constant suffixes), "
        "the garbage collector's thresholds",
        "every output starts results/{exp}/, so Snakemake's prefix index tests every output of "
        "every rule for every file: a third of planning the paper's Table 1",
        "fast plans of large studies (the plan is the same either way)",
    ),
    Patch(
        "locks",
        "PersistenceBase.lock, PersistenceBase.cleanup_locks and FilePersistence._delete_locks, "
        "in the main process",
        "Snakemake 9's unlock removes every run's lock files, so a second snakemake on a live run "
        "side by side is no longer refused; a run killed hard leaves locks that look live",
        "runs side by side in one folder keep their own locks, a second snakemake on a live run "
        "stops naming it, a run killed with kill -9 resumes without --unlock",
    ),
    Patch(
        "keep",
        "Job.remove_existing_output, Job.cleanup and Job.postprocess, in every snakemake process; "
        "reads and writes Snakemake's metadata records (PersistenceBase._read_record ...)",
        "Snakemake deletes a job's outputs before it reruns and after it fails, so a failing "
        "rerun loses the finished outputs it was to replace",
        "a failing rerun leaves the finished outputs (and their records) as they were",
    ),
    Patch(
        "integrity",
        "wraps DAG.__init__ (damaged files join forcefiles) and DAG.update_needrun (the consumers "
        "of convert_gguf and hub_download jobs), in the main process",
        "Snakemake notices a missing output, not a damaged one (a truncated table: 'Nothing to be "
        "done'), and reruns everything downstream of a rebuilt shared base",
        "a damaged finished file is found and rebuilt with what depends on it; a rebuilt shared "
        "base retrains no member unless its bytes changed",
    ),
)


def mode() -> str:
    """``on`` (the default) or ``plain``, from the environment variable :data:`VARIABLE`."""
    value = os.environ.get(VARIABLE, "").strip().lower() or "on"
    if value not in MODES:
        raise ValueError(f"sparta: {VARIABLE}={value!r}: use plain (Snakemake unchanged) or on (the default)")
    return value


def snakemake_version() -> str:
    import snakemake

    return str(getattr(snakemake, "__version__", "unknown"))


def version_warning(version: str) -> str | None:
    """What may not hold on Snakemake ``version`` (None: a tested version)."""
    if version in TESTED:
        return None
    lines = [
        f"sparta: warning: sparta.engine changes Snakemake internals and was tested with Snakemake "
        f"{', '.join(TESTED)}; this is Snakemake {version}. These protections may not hold here:",
        *[f"  {p.name}: {p.gives}" for p in PATCHES],
        "A part stops the run where an internal it replaces is missing, but one whose meaning changed "
        "goes unnoticed. Install the tested Snakemake (requirements.txt), or run plain Snakemake "
        f"without these changes: {VARIABLE}=plain (docs/development/engine.md).",
    ]
    return "\n".join(lines)


def describe() -> str:
    """The changes, the tested Snakemake versions, the installed one and the switch."""
    version = snakemake_version()
    state = "tested" if version in TESTED else "NOT tested: see the warning at install"
    try:
        now = mode()
    except ValueError as e:
        now = str(e)
    lines = [
        "sparta.engine: changes to how Snakemake behaves (docs/development/engine.md)",
        f"tested with Snakemake {', '.join(TESTED)}; installed: {version} ({state})",
        f"switch: {VARIABLE}=plain runs plain Snakemake (now: {now})",
    ]
    for p in PATCHES:
        lines += ["", p.name, f"  changes: {p.changes}", f"  why: {p.why}", f"  gives: {p.gives}"]
    return "\n".join(lines)


_state = {"installed": False, "run_dirs": ()}


def install(workflow, run: str, kind: str, target, shared_bases=(), run_dirs=()) -> bool:
    """Install every change for this snakemake process (each part says in which processes it
    acts). ``run_dirs``: where :func:`started` looks for what an interrupted run set aside.
    Return False, changing nothing, under ``SPARTA_ENGINE=plain``."""
    from snakemake.exceptions import WorkflowError

    from . import integrity, keep, locks, planning

    try:
        plain = mode() == "plain"
    except ValueError as e:
        raise WorkflowError(str(e)) from None
    main = workflow.is_main_process
    if plain:
        if main:
            _say(f"{VARIABLE}=plain: Snakemake runs unchanged (docs/development/engine.md)")
        return False
    warning = version_warning(snakemake_version())
    if warning and main:
        print(warning, file=sys.stderr)
    kept = planning.install()
    if kept and main:
        _say(f"planning keeps Snakemake's own {'; '.join(kept)} (the same plan, slower)")
    locks.install(workflow, run, kind)
    keep.install(workflow)
    integrity.install(workflow, target)
    integrity.shared_bases(workflow, list(shared_bases))
    _state.update(installed=True, run_dirs=tuple(run_dirs))
    return True


def started(workflow) -> None:
    """At a run's start, its lock held (onstart): :func:`sparta.engine.keep.recover`, where the
    engine is installed."""
    if _state["installed"]:
        from . import keep

        keep.recover(workflow, _state["run_dirs"])


def _say(line: str) -> None:
    print(f"sparta: engine: {line}", file=sys.stderr)
