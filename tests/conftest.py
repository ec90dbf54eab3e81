import pytest

from .tiny import build_tiny_model
from .workflow_helpers import run_snakemake, tiny_config, write_config


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random chat model and its tokenizer, loaded once for the session."""
    from sparta.members import MemberSpec
    from sparta.models import MemberLoader

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    loader = MemberLoader("cpu", "float32")
    spec = MemberSpec("tiny", str(folder))
    return loader.load(spec), loader.tokenizer(spec)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """A tiny random chat model folder (the base of the workflow tests' pools)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_base") / "model")


@pytest.fixture(scope="session")
def run_a(tmp_path_factory, tiny_base):
    """The tiny workflow run once, locally, with fanout member: the reference other runs
    (resumed, pooled, through Slurm) are compared with."""
    root = tmp_path_factory.mktemp("run_a")
    cfg = write_config(root, tiny_config(tiny_base))
    proc = run_snakemake(root / "work", cfg)
    return root / "work", proc
