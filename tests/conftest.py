import contextlib
import importlib.util

import pytest

from .tiny import build_tiny_model
from .workflow_helpers import run_snakemake, tiny_config, write_config

# vLLM's tests run in the vLLM environment (`make test-vllm`), which CI builds and runs; where
# vLLM is not installed they are not collected (rather than skipped)
collect_ignore = [] if importlib.util.find_spec("vllm") else ["test_vllm_cpu.py"]
_EXIT_STATUS = {"status": 0}


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A session that started vLLM engines in its own process (the parity tests) ends as a job
    script does (sparta.jobs.finish: engines stopped, no interpreter teardown, in which vLLM
    0.32 aborts the process), with pytest's own exit status."""
    import sys

    if getattr(sys.modules.get("sparta.backends.vllm"), "STARTED", None):
        from sparta.jobs import finish

        finish(_EXIT_STATUS["status"])


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random chat model and its tokenizer, loaded once for the session."""
    from sparta.members import MemberSpec
    from sparta.models import MemberLoader

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    loader = MemberLoader("cpu", "float32")
    spec = MemberSpec("tiny", str(folder))
    return loader.load(spec), loader.tokenizer(spec)


@contextlib.contextmanager
def _built_once(tmp_path_factory, name: str):
    """A folder every pytest-xdist worker of this session shares (the workers' common base
    folder; the session's own without xdist), locked while the first one builds it: yields
    the folder and whether it is still to build. A whole run is made once per session, not
    once per worker."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    with FileLock(str(shared / f"{name}.lock")):
        folder = shared / name
        yield folder, not (folder / ".built").exists()
        (folder / ".built").touch()


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """A tiny random chat model folder (the base of the workflow tests' pools), one for every
    worker (so the runs' settings, which hold its path, are the same in every test)."""
    with _built_once(tmp_path_factory, "tiny_base") as (folder, to_build):
        if to_build:
            build_tiny_model(folder / "model")
    return folder / "model"


@pytest.fixture(scope="session")
def run_a(tmp_path_factory, tiny_base):
    """The tiny workflow run once, locally, with fanout pool (the embedded default): the
    reference other runs (resumed, per member, through Slurm) are compared with. Built once
    for all workers; tests copy it before changing anything."""
    with _built_once(tmp_path_factory, "run_a") as (root, to_build):
        if to_build:
            cfg = write_config(root, tiny_config(tiny_base))
            run_snakemake(root / "work", cfg)
    return root / "work", None


# The longest modules first, so the two workers finish together: the first builds the shared
# tiny run, the second starts the real default pool meanwhile. Worker-seconds of each module in
# a fresh-clone CI run on 2 cores (2026-12-03, a core per test run): study 637, workflow 460
# (with the shared run), default pool 457, slurm 332, hub 296, side by side 221, reference
# judge 186, cluster config 84, export 80, integrity 51, the rest under 20 each; both workers
# were busy to the end. Since: engine (the tiny run again on plain Snakemake) 286 on a busy
# machine (2026-12-05). A module not listed runs after these, the slow ones first.
# pyproject.toml passes --no-loadscope-reorder: pytest-xdist would otherwise hand out the
# modules with the most tests first (the default pool, 2 tests, last).
LONGEST_FIRST = (
    "test_workflow",
    "test_default_pool",
    "test_study",
    "test_slurm",
    "test_hub",
    "test_engine",
    "test_side_by_side",
    "test_reference_judge",
    "test_export",
    "test_integrity",
    "test_cluster_config",
    "test_gpu_check",
    "test_planning",
    "test_keep",
    "test_handoff",
)


def pytest_collection_modifyitems(config, items):
    """The order the test modules run in: :data:`LONGEST_FIRST`, then the other modules with
    slow tests, then the quick ones; a module's tests stay together and in order. Under
    pytest-xdist (``--dist loadfile``, pyproject.toml) each module runs on one worker, its
    module fixtures built once, and a worker takes the next module in this order when it is
    free (in this order: ``--no-loadscope-reorder``)."""
    modules: dict[str, int] = {}
    for item in items:
        name = item.module.__name__.rsplit(".", 1)[-1]
        rank = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        rank += 1 if rank == len(LONGEST_FIRST) and not item.get_closest_marker("slow") else 0
        modules[name] = min(modules.get(name, rank), rank)
    order = {name: k for k, name in enumerate(modules)}
    items.sort(key=lambda item: (modules[(n := item.module.__name__.rsplit(".", 1)[-1])], order[n]))
