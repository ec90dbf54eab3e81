"""Every value checked for its meaning, not only its type, before any job: numbers (integral
floats, NaN and infinities, numbers YAML reads as text, settings that cannot change
anything, bounds that depend on the base model), messages (one line per problem, all at
once, a study's problems once with the runs they affect) and studies (seeds, overlays)."""

import copy
import math

import pytest
import yaml

from sparta import config as sparta_config
from sparta.lengths import context_length
from sparta.settings import Settings, SettingsError
from sparta.study import expand

from .workflow_helpers import REPO, run_snakemake, tiny_config, write_config


def checked(cfg: dict, root=REPO):
    """The settings of a config after the checks a run makes first (schema, then the world)."""
    cfg = copy.deepcopy(cfg)
    sparta_config.validate(cfg)
    return sparta_config.load(cfg, root)


def message(cfg: dict, root=REPO) -> str:
    with pytest.raises(sparta_config.ConfigError) as e:
        checked(cfg, root)
    return str(e.value)


# --- numbers by meaning ----------------------------------------------------------------------


def test_integral_floats_of_integer_keys_are_integers(tiny_base):
    s = checked(
        tiny_config(
            tiny_base,
            iterations=2.0,
            prompts={"per_iteration": 6.0},
            reputation={"window": 10.0},
            generation={"max_new_tokens": 8.0},
        )
    )
    assert s.iterations == 2 and type(s.iterations) is int
    assert type(s.prompts.per_iteration) is int and type(s.reputation.window) is int
    assert type(s.generation.max_new_tokens) is int
    assert list(range(1, s.iterations + 1)) == [1, 2]  # what common.smk does with it
    # the settings alone (a job rebuilding its sections) read them the same way
    direct = Settings.from_config(tiny_config(tiny_base, iterations=3.0, reputation={"window": 4.0}))
    assert type(direct.iterations) is int and type(direct.reputation.window) is int


@pytest.mark.parametrize(
    "change, key",
    [
        ({"iterations": 2.5}, "iterations"),
        ({"prompts": {"per_iteration": 6.5}}, "prompts.per_iteration"),
        ({"reputation": {"window": 3.5}}, "reputation.window"),
    ],
)
def test_fractional_values_of_integer_keys_name_the_key(tiny_base, change, key):
    text = message(tiny_config(tiny_base, **change))
    assert f"{key}: " in text and "integer" in text, text
    with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
        Settings.from_config(tiny_config(tiny_base, **change))


@pytest.mark.parametrize(
    "change, key",
    [
        ({"generation": {"temperature": math.nan}}, "generation.temperature"),
        ({"dpo": {"beta": math.inf}}, "dpo.beta"),
        ({"dpo": {"epochs": math.nan}}, "dpo.epochs"),
        ({"reputation": {"scale": math.inf}}, "reputation.scale"),
        ({"matchmaking": {"alpha": math.nan}}, "matchmaking.alpha"),
        ({"prompts": {"validation": -math.inf}}, "prompts.validation"),
        ({"sft": {"learning_rate": math.inf}}, "sft.learning_rate"),
    ],
)
def test_nan_and_infinities_are_rejected_for_every_number(tiny_base, change, key):
    text = message(tiny_config(tiny_base, **change))
    assert f"{key}: " in text and "not a finite number" in text, text
    assert text.count("\n") == 1, text  # one problem, one line


def test_nan_written_in_yaml_is_rejected(tiny_base):
    cfg = tiny_config(tiny_base)
    cfg.update(yaml.safe_load("dpo: {beta: .nan}\nreputation: {scale: .inf}"))
    text = message(cfg)
    assert "dpo.beta: nan" in text and "reputation.scale: inf" in text, text


def test_numbers_yaml_reads_as_text_are_the_numbers_they_mean(tiny_base):
    overlay = yaml.safe_load(
        "dpo: {learning_rate: 1e-6, beta: 5E-2}\nsft: {learning_rate: 2e-4}\niterations: 2e0\n"
        "reputation: {scale: 2e1}\nsystem_prompt: 1e5\n"
    )
    assert overlay["dpo"]["learning_rate"] == "1e-6"  # PyYAML: a string
    s = checked(tiny_config(tiny_base, **overlay))
    assert s.dpo.learning_rate == 1e-6 and s.dpo.beta == 0.05 and s.sft.learning_rate == 2e-4
    assert s.iterations == 2 and type(s.iterations) is int
    assert s.reputation.scale == 20.0
    assert s.system_prompt == "1e5"  # a text key keeps its text


def test_text_that_is_no_number_names_the_key(tiny_base):
    text = message(tiny_config(tiny_base, dpo={"learning_rate": "1e-6x"}))
    assert "dpo.learning_rate: '1e-6x' is not of type 'number'" in text, text
    text = message(tiny_config(tiny_base, dpo={"beta": "nan"}))
    assert "dpo.beta: " in text and "finite number" in text, text


@pytest.mark.parametrize(
    "reputation, key",
    [
        ({"scale": 10000, "kappa_start": 1e-9, "kappa_min": 0}, "reputation.scale"),
        ({"eps": 0}, "reputation.eps is 0"),
        ({"kappa_start": 0, "kappa_min": 0}, "reputation.kappa_start and kappa_min are 0"),
    ],
)
def test_a_reputation_that_cannot_move_is_an_error(tiny_base, reputation, key):
    text = message(tiny_config(tiny_base, reputation=reputation))
    assert key in text and "reputation.updates: false" in text, text
    # the ablation that switches updates off says so, and is accepted
    checked(tiny_config(tiny_base, reputation={**reputation, "updates": False}))


def test_testing_only_the_selected_member_needs_a_job_per_checkpoint(tiny_base):
    selected = {"evaluation": {"test": "selected"}}
    text = message(tiny_config(tiny_base, fanout="member", **selected))
    assert "evaluation.test: selected" in text and "set fanout: pool" in text, text
    assert checked(tiny_config(tiny_base, fanout="pool", **selected)).evaluation.test == "selected"


@pytest.mark.parametrize(
    "change, key",
    [
        ({"dpo": {"epochs": 1000}}, "dpo.epochs: 1000 is greater than the maximum of 100"),
        ({"sft": {"max_steps": 10**7}}, "sft.max_steps: 10000000 is greater than the maximum of 100000"),
    ],
)
def test_training_lengths_have_a_ceiling(tiny_base, change, key):
    assert key in message(tiny_config(tiny_base, **change))


@pytest.mark.parametrize(
    "change, key",
    [
        ({"dpo": {"max_length": 2048}}, "dpo.max_length (2048) is longer than the context"),
        ({"sft": {"max_length": 4096}}, "sft.max_length (4096) is longer than the context"),
        ({"judge": {"max_length": 1025}}, "judge.max_length (1025) is longer than the context"),
        ({"generation": {"max_new_tokens": 1024}}, "generation.max_new_tokens (1024) leaves no room"),
        (
            {"evaluation": {"tasks": [{"name": "arith", "source": "prompts", "max_new_tokens": 5000}]}},
            "evaluation.tasks (arith).max_new_tokens (5000) leaves no room",
        ),
    ],
)
def test_token_budgets_fit_the_base_models_context(tiny_base, change, key):
    text = message(tiny_config(tiny_base, **change))
    assert key in text and "1024 tokens" in text and str(tiny_base) in text, text
    # at the context length itself a training example fits
    checked(tiny_config(tiny_base, dpo={"max_length": 1024}, judge={"max_length": 1024}))


def test_context_is_read_from_the_config_of_every_base(tiny_base, tmp_path):
    import json
    import shutil

    short = tmp_path / "short"
    shutil.copytree(tiny_base, short)
    data = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**data, "max_position_embeddings": 128}))
    cfg = tiny_config(tiny_base)
    cfg["members"] = cfg["members"][:2] + [{"name": "cid", "base": str(short)}]
    text = message(cfg)  # the smallest context decides: 256 tokens of DPO do not fit in 128
    assert f"dpo.max_length (256) is longer than the context of base model {short} (128 tokens" in text
    assert context_length(tmp_path) is None  # no config.json: nothing to check


# --- messages a person can act on ------------------------------------------------------------


def test_every_schema_problem_at_once_one_line_each(tiny_base):
    cfg = tiny_config(tiny_base, iteratons=3, generation={"max_new_tokns": 4, "top_p": 5})
    text = message(cfg)
    lines = text.splitlines()
    assert lines[0] == "config problems:" and len(lines) == 4, text
    assert "  - iteratons: unknown key; did you mean iterations?" in lines
    assert "  - generation.max_new_tokns: unknown key; did you mean max_new_tokens?" in lines
    assert "  - generation.top_p: 5 is greater than the maximum of 1; set a value in (0, 1]" in lines
    assert "description" not in text and str(tiny_base) not in text  # neither schema nor config


def test_a_list_item_is_named_by_its_index(tiny_base):
    members = [{"name": "ann", "base": "tiny"}, {"name": "b b", "base": "tiny", "adaptr": "x"}]
    text = message(tiny_config(tiny_base, members=members))
    assert "members[1].name: 'b b' does not match" in text, text
    assert "members[1].adaptr: unknown key; did you mean adapter?" in text, text


def test_a_long_value_is_cut_short(tiny_base):
    text = message(tiny_config(tiny_base, members={f"m{i}": {"base": "tiny"} for i in range(500)}))
    assert "members: " in text and len(text) < 400 and text.endswith("..."), text


def test_a_typo_at_the_top_stops_snakemake_in_a_few_lines(tiny_base, tmp_path):
    cfg = write_config(tmp_path, tiny_config(tiny_base, iteratons=3, dpo={"learning_rat": 1e-5}))
    proc = run_snakemake(tmp_path / "work", cfg, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "iteratons: unknown key; did you mean iterations?" in out, out
    assert "dpo.learning_rat: unknown key; did you mean learning_rate?" in out, out
    assert len(out.splitlines()) < 20, out  # not the schema and the merged config
    assert out.count("config problems:") == 1


def study(tiny_base, seeds=(1, 2), **experiments) -> dict:
    cfg = tiny_config(tiny_base, "s")
    cfg["study"] = {"seeds": list(seeds), "experiments": experiments}
    return cfg


def test_a_study_tells_each_problem_once_with_the_runs_it_affects(tiny_base):
    cfg = study(
        tiny_base,
        sparta={},
        spin={"method": "spin"},
        typo={"dpo": {"bet": 0.2}},
        hot={"generation": {"temperature": "1e9"}},
    )
    cfg["prompts"]["per_iteration"] = 500
    text = message_of_study(cfg)
    lines = text.splitlines()
    assert lines[0] == "config problems:" and text.count("config problems:") == 1
    assert "  - dpo.bet: unknown key; did you mean beta? (runs: typo-seed1, typo-seed2)" in lines, text
    hot = "  - generation.temperature: 1000000000.0 is greater than the maximum of 10; set a value in [0, 10]"
    assert f"{hot} (runs: hot-seed1, hot-seed2)" in lines, text
    assert len(lines) == 3, text  # schema problems first; the world is checked once they are fixed
    del cfg["study"]["experiments"]["typo"], cfg["study"]["experiments"]["hot"]
    text = message_of_study(cfg)
    lines = text.splitlines()
    per_iteration = [line for line in lines if "prompts.per_iteration (500)" in line]
    assert len(per_iteration) == 1 and per_iteration[0].endswith("(every run)"), text
    spin = [line for line in lines if "method spin needs" in line]
    assert spin == [
        "  - method spin needs a reference answer per prompt: set prompts.reference_column "
        "(runs: spin-seed1, spin-seed2)"
    ], text


def message_of_study(cfg: dict) -> str:
    cfg = copy.deepcopy(cfg)
    with pytest.raises(sparta_config.ConfigError) as e:
        sparta_config.validate(cfg)
        sparta_config.load_study(cfg, REPO)
    return str(e.value)


# --- studies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section, key",
    [
        ({"seeds": [1, 2, 1], "experiments": {"sparta": {}}}, "study.seeds: 1 listed more than once"),
        ({"seeds": [1], "experiments": {"a": {"seed": 3}}}, "study.experiments.a.seed: an overlay cannot"),
        ({"seeds": [1], "experiments": {"a": {"fanout": "member"}}}, "study.experiments.a.fanout: fanout is"),
        ({"seeds": [1], "experiments": {"a": {}, "b": {"device": "cpu"}}}, "study.experiments.b.device"),
        ({"seeds": [1], "experiments": {"a": {"experiment": "x"}}}, "study.experiments.a.experiment"),
        ({"seeds": [1], "experiments": {}}, "study.experiments: list at least one experiment"),
        ({}, "study.experiments: list at least one experiment"),
        ({"experiments": {"a": {}}, "tasks": {}}, "study.tasks: list at least one task"),
        ({"experiments": {"a": {}}, "tasks": {"t": {"seed": 2}}}, "study.tasks.t.seed: an overlay cannot"),
        ({"experiments": {"a": {}}, "tasks": {"t": {"backend": "hf"}}}, "study.tasks.t.backend: backend is"),
        ({"experiments": {"a": {}}, "tasks": {"a": {}}}, "study.tasks: a is also an experiment's name"),
        (
            {"experiments": {"a": {}}, "experiment_tasks": {"a": ["t"]}},
            "study.experiment_tasks: names the tasks",
        ),
        (
            {"experiments": {"a": {}}, "tasks": {"t": {}}, "experiment_tasks": {"b": ["t"]}},
            "study.experiment_tasks.b: no experiment b in study.experiments (experiments: a)",
        ),
        (
            {"experiments": {"a": {}}, "tasks": {"t": {}}, "experiment_tasks": {"a": ["t", "u"]}},
            "study.experiment_tasks.a: u not in study.tasks (tasks: t)",
        ),
        (
            {"experiments": {"a": {}}, "tasks": {"t": {}}, "experiment_tasks": {"a": []}},
            "study.experiment_tasks.a: list at least one task",
        ),
    ],
)
def test_a_bad_study_section_names_the_key(tiny_base, section, key):
    cfg = tiny_config(tiny_base, "s")
    cfg["study"] = section
    text = message_of_study(cfg)
    assert key in text and text.count("\n") == 1, text
    with pytest.raises(SettingsError, match=key.split(":")[0].replace(".", r"\.")):
        expand(cfg)


def test_a_good_study_and_the_embedded_configs_are_unchanged(tiny_base):
    cfg = study(tiny_base, sparta={}, no_updates={"reputation": {"updates": False}})
    cfg["prompts"]["per_iteration"] = 6
    s = sparta_config.load_study(sparta_config.validate(copy.deepcopy(cfg)), REPO)
    assert sorted(s.experiments) == [
        "s/no_updates-seed1",
        "s/no_updates-seed2",
        "s/sparta-seed1",
        "s/sparta-seed2",
    ]
    # validation leaves a valid config as it is: the same settings as before it
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    test = yaml.safe_load((REPO / ".test" / "config.yaml").read_text())
    from sparta.study import merge

    for name, config in (
        ("default", base),
        (".test", merge(base, test)),
        ("paper", yaml.safe_load((REPO / "workflow/configs/paper.yaml").read_text())),
        (
            "study-small",
            merge(base, yaml.safe_load((REPO / "workflow/configs/study-small.yaml").read_text())),
        ),
    ):
        before = copy.deepcopy(config)
        assert sparta_config.validate(config) == before, name
        assert expand(config).experiments == expand(before).experiments, name
