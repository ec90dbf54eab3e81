"""The config schema and the constants table of the docs are generated from the settings
dataclasses (``python -m sparta.docgen --write``): the committed files are what it writes,
and the schema keeps the structure the settings declare."""

import dataclasses

import pytest

from sparta import schema as generated
from sparta.fields import problems
from sparta.matchmaking import MatchSettings, PoolError
from sparta.reputation import ReputationSettings
from sparta.settings import GenerationSettings, JudgeSettings, Runtime, Sampling, SamplingFields, Settings


@pytest.mark.parametrize("path", list(generated.outputs()), ids=lambda p: p.name)
def test_generated_files_are_up_to_date(path):
    text = generated.outputs()[path]
    assert path.read_text() == text, (
        f"{path.relative_to(generated.REPO)} differs from the settings dataclasses: "
        f"run {generated.COMMAND} and commit the result"
    )


def test_schema_states_bounds_choices_and_defaults_of_the_fields():
    s = generated.schema()
    rep = s["properties"]["reputation"]["properties"]
    assert (rep["scale"]["minimum"], rep["scale"]["maximum"]) == (0.01, 10000) and rep["ddof"]["enum"] == [
        0,
        1,
    ]
    assert rep["preset"]["enum"] == ["sparta", "authors", "paper"]
    assert "Default: 20." in rep["scale"]["description"]
    assert s["properties"]["dpo_fanout"] == {
        **s["properties"]["dpo_fanout"],
        "enum": ["member", "pool", None],
    }
    convert = s["properties"]["resources"]["properties"]["convert"]["properties"]
    assert "Default: 0." in convert["gpu"]["description"]  # the parent's default, not the class's
    assert s["required"] == ["experiment", "members", "prompts"]
    assert "study" in s["properties"]  # declared in the generator, once


def test_sampling_is_declared_once_and_config_keys_stay_flat():
    names = [f.name for f in dataclasses.fields(SamplingFields)]
    for cls in (Sampling, GenerationSettings, JudgeSettings):
        assert set(names) <= {f.name for f in dataclasses.fields(cls)}
    assert JudgeSettings().max_new_tokens == 256 and GenerationSettings().max_new_tokens == 512
    assert JudgeSettings(temperature=0.0).sampling == Sampling(0.0, 0.95, 50, 256)
    judge = generated.schema()["properties"]["judge"]["properties"]
    assert {"temperature", "top_p", "top_k", "max_new_tokens", "batch_size"} <= set(judge)


def test_runtime_is_the_settings_fields():
    runtime = {f.name: f for f in dataclasses.fields(Runtime)}
    ours = {f.name: f for f in dataclasses.fields(Settings)}
    assert list(runtime) == ["seed", "device", "dtype", "system_prompt"]
    assert all(runtime[k].default == ours[k].default for k in runtime)
    assert Runtime(device="cpu").seed == 42


def test_dataclasses_check_the_declared_bounds():
    assert problems(ReputationSettings()) == [] and problems(MatchSettings()) == []
    with pytest.raises(ValueError, match="kappa_decay must be in \\(0, 1\\]"):
        ReputationSettings(kappa_decay=0)
    with pytest.raises(ValueError, match="window_scope must be one of run, iteration"):
        ReputationSettings(window_scope="epoch")
    with pytest.raises(PoolError, match="rounds_per_iteration must be >= 1"):
        MatchSettings(rounds_per_iteration=0)


def test_method_choices_are_the_registered_methods():
    import typing

    from sparta.methods import METHODS

    assert typing.get_args(typing.get_type_hints(Settings)["method"]) == METHODS


def test_metric_choices_are_the_registered_scorers():
    import typing

    from sparta.evaluate import SCORERS
    from sparta.settings import TaskSpec

    assert set(typing.get_args(typing.get_type_hints(TaskSpec)["metric"])) == set(SCORERS)
