import pytest

from .tiny import build_tiny_model


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny random chat model and its tokenizer, loaded once for the session."""
    from sparta.models import MemberLoader, MemberSpec

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    loader = MemberLoader("cpu", "float32")
    spec = MemberSpec("tiny", str(folder))
    return loader.load(spec), loader.tokenizer(spec)
