"""The "Your own pool" example of the docs (docs/guides/own-pool.md), copied verbatim (only its
folders moved under a temporary root, as stand-ins), passes the checks and plans its jobs with
`snakemake -n`, merged over config.yaml as a run from the repository root merges it."""

import json
import re
import shutil

import pytest
import yaml

from .workflow_helpers import REPO, fake_model_folder, run_snakemake

OWN_POOL_PAGE = REPO / "docs" / "guides" / "own-pool.md"


def own_pool_example() -> str:
    """The page's first YAML block after its heading "A config of your own"."""
    text = OWN_POOL_PAGE.read_text()
    section = text[text.index("## A config of your own") :]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def workspace(tmp_path):
    example = own_pool_example()
    for folder in ("/models/", "/adapters/", "/data/"):  # the example's absolute folders
        example = example.replace(f" {folder}", f" {tmp_path}{folder}")
    cfg = yaml.safe_load(example)
    for spec in cfg["base_models"].values():
        fake_model_folder(tmp_path / spec["path"])
    for member in cfg["members"]:
        if member.get("adapter"):
            fake_model_folder(tmp_path / member["adapter"], adapter=True)
        if member["base"] not in cfg["base_models"]:
            fake_model_folder(tmp_path / member["base"])
    prompts = tmp_path / cfg["prompts"]["file"]
    prompts.parent.mkdir(parents=True, exist_ok=True)
    column = cfg["prompts"]["prompt_column"]
    prompts.write_text("".join(json.dumps({column: f"Write a haiku about {i}."}) + "\n" for i in range(3000)))
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "config.yaml", work / "config.yaml")  # what a run from the repository merges
    (tmp_path / "my.yaml").write_text(example)
    return work, tmp_path / "my.yaml", cfg


def test_the_own_pool_example_plans_its_jobs(workspace):
    work, my, cfg = workspace
    assert str(work.parent) in my.read_text()  # the stand-ins, not the example's /models
    proc = run_snakemake(work, my, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for member in ("code_alpaca", "lima", "plain"):
        assert f"results/my-pool/iter_8/members/{member}/member.json" in out, member
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert int(jobs["dpo"]) == 3 * cfg["iterations"], jobs
    assert "convert_gguf" not in jobs and "sft_member" not in jobs  # config.yaml's toy pool is gone
    # what the example still takes from config.yaml's toy, said once at the start
    (note,) = [line for line in out.splitlines() if "takes" in line and line.startswith("sparta: note")]
    assert "judge.max_length 512 (default 1024)" in note and "3 setting(s)" in note
    run_snakemake(work, my, "results/my-pool/settings.yaml")  # a local rule, no model: the record
    recorded = yaml.safe_load((work / "results/my-pool/settings.yaml").read_text())
    assert "judge.max_length 512 (default 1024)" in recorded["from_embedded_default"]


def test_what_a_config_of_its_own_pool_takes_from_the_embedded_toy():
    from sparta.config import embedded_leftovers

    embedded = yaml.safe_load((REPO / "config.yaml").read_text())
    assert embedded_leftovers(embedded, {"iterations": 1}) == []  # the embedded pool: nothing said
    own = {"members": [{"name": "a", "base": "x"}], "base_models": {"x": {"path": "m"}}}
    found = embedded_leftovers(embedded, own)
    assert "prompts.per_iteration 12 (default 1000)" in found
    assert "generation.max_new_tokens 48 (default 512)" in found
    assert "evaluation.tasks [arithmetic] (default none)" in found
    assert not any(f.startswith(("sft.", "members", "base_models", "experiment")) for f in found)  # no SFT
    found = embedded_leftovers(
        embedded, {**own, "prompts": {"per_iteration": 5}, "generation": {"max_new_tokens": "48"}}
    )
    assert not any(f.startswith(("prompts.per_iteration", "generation.")) for f in found)  # set: not said
    sft = {**own, "members": [{"name": "a", "base": "x", "sft_domain": "addition"}]}
    assert "sft.max_steps 12 (default 30)" in embedded_leftovers(embedded, sft)
    assert "dpo.learning_rate 5e-05 (default 1e-06)" in found
    off = embedded_leftovers(embedded, {**own, "evaluation": {"enabled": False}})
    assert not any(f.startswith("evaluation.") for f in off)  # evaluation off: its tasks are unused


def test_the_own_pool_example_settings(workspace, monkeypatch, capsys):
    from sparta.cli import main

    work, my, cfg = workspace
    monkeypatch.chdir(work)
    assert main(["config", "--configfile", str(my), "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)
    assert settings["dpo"]["learning_rate"] == 1e-6  # written 1e-6: a number, not text
    assert settings["generation"]["max_new_tokens"] == 512 and settings["iterations"] == 8
    assert [m["name"] for m in settings["members"]] == ["code_alpaca", "lima", "plain"]
    assert settings["prompts"]["id_column"] is None and settings["evaluation"]["enabled"] is False


def test_a_base_model_no_member_names_is_not_checked(tiny_base):
    from sparta import config as sparta_config

    from .workflow_helpers import tiny_config

    unused = {"gguf_package": "no_such_package_here", "gguf_file": "x.gguf"}
    cfg = tiny_config(tiny_base, base_models={"tiny": {"path": str(tiny_base)}, "toy": unused})
    sparta_config.load(cfg, REPO)  # config.yaml's smollm2, merged under a user's pool: never loaded
    cfg["members"][2]["base"] = "toy"
    with pytest.raises(sparta_config.ConfigError, match="no_such_package_here"):
        sparta_config.load(cfg, REPO)


def test_sparta_config_takes_several_files_and_studies(monkeypatch, capsys):
    from sparta.cli import main

    monkeypatch.chdir(REPO)
    paper = ["workflow/configs/paper.yaml", "workflow/configs/paper-study.yaml"]
    assert main(["config", "--base", paper[0], "--configfile", paper[1], "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert len(runs) == 12 * 3 and runs["paper/spin-seed2"]["method"] == "spin"
    assert runs["paper/spin-seed2"]["seed"] == 2 and len(runs["paper/pool_3-seed1"]["members"]) == 3
    # two files after one --configfile, merged in order over config.yaml
    assert main(["config", "--configfile", ".test/config.yaml", "workflow/configs/study-small.yaml"]) == 0
    runs = yaml.safe_load(capsys.readouterr().out)
    assert sorted(runs)[0] == "study-small/meta_rewarding-seed1" and len(runs) == 10
    assert runs["study-small/sparta-seed1"]["iterations"] == 1  # .test's, under the study
    assert main(["config", "--configfile", ".test/config.yaml", "/no/such.yaml"]) == 2
    assert "no such config file: /no/such.yaml" in capsys.readouterr().err


def test_a_config_that_is_not_yaml_gets_one_line_naming_the_place(tmp_path, capsys, monkeypatch):
    """A tab in the indentation (or a list where a mapping belongs): one line with the file,
    line and column, exit 2, no traceback."""
    from sparta.cli import main

    monkeypatch.chdir(REPO)
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("experiment: x\niterations:\n\t2\n")
    listed = tmp_path / "listed.yaml"
    listed.write_text("- iterations: 2\n")
    tab_says = (
        "line 3, column 1: not valid YAML: found character '\\t' that cannot start any token (YAML indents"
    )
    for path, says in ((tabbed, tab_says), (listed, "a mapping of keys")):
        assert main(["config", "--configfile", str(path)]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "name", ["config.yaml", "config-study.yaml", "config-baseline.yaml", "config-tasks.yaml"]
)
def test_each_kind_of_run_has_a_test_config(name, capsys, monkeypatch):
    """.test/ holds one config per kind of run (single, study, baseline, study with tasks);
    each resolves."""
    from sparta.cli import main

    monkeypatch.chdir(REPO)
    assert main(["config", "--configfile", f".test/{name}", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    if name == "config-study.yaml":
        assert sorted(runs) == ["study-test/sparta-seed1", "study-test/spin-seed1"]
    elif name == "config-tasks.yaml":
        assert sorted(runs) == [
            "tasks-test/arithmetic/sparta-seed1",
            "tasks-test/multiplication/sparta-seed1",
        ]
        assert runs["tasks-test/multiplication/sparta-seed1"]["prompts"]["where"] == {
            "domain": "multiplication"
        }
    else:  # a single run prints its settings
        assert runs["iterations"] == 1
        assert runs["method"] == ("self_rewarding" if "baseline" in name else "sparta")
