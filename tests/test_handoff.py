"""What DPO learned, and handing a member off: training logs as tables, held-out preference
accuracy, `sparta export` (adapter and merged), preference sets as Hugging Face datasets.
On the shared tiny run (run_a)."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from sparta import tables
from sparta.files import umask
from sparta.train import Tracking

pytestmark = pytest.mark.slow
EXP = "results/tiny"


def test_every_trained_checkpoint_keeps_its_trainer_log(run_a):
    run = run_a[0] / EXP
    for t, stage in ((0, "sft"), (1, "dpo"), (2, "dpo")):
        log = tables.read(run / f"iter_{t}/members/ann/training_log.parquet", "training_log")
        assert set(log["stage"]) == {stage} and (log["iteration"] == t).all()
        steps = log[log["loss"].notna()]
        assert len(steps) >= 2 and steps["step"].is_monotonic_increasing
        assert log["train_loss"].notna().sum() == 1  # the trainer's summary row
        if stage == "dpo":
            assert steps["rewards_accuracies"].between(0, 1).all() and steps["rewards_margins"].notna().all()
            assert (log["examples"] == len(pd.read_parquet(run / f"iter_{t}/preferences.parquet"))).all()
    gathered = tables.read(run / "analysis/training.parquet", "training")
    assert set(gathered["member"]) == {"ann", "bob", "cid"} and set(gathered["iteration"]) == {0, 1, 2}


def test_held_out_preference_accuracy_before_and_after_dpo(run_a):
    run = run_a[0] / EXP
    acc = tables.read(run / "analysis/pair_accuracy.parquet", "pair_accuracy")
    pairs = len(pd.read_parquet(run / "iter_2/preferences.parquet"))
    assert set(acc["iteration"]) == {1} and set(acc["when"]) == {"before", "after"}
    assert set(acc["member"]) == {"ann", "bob", "cid"} and (acc["pairs"] == pairs).all()
    assert (acc.loc[acc["when"] == "before", "checkpoint"] == 0).all()
    assert acc["accuracy"].between(0, 1).all()
    assert (acc["accuracy_low"] <= acc["accuracy"]).all() and (acc["accuracy"] <= acc["accuracy_high"]).all()
    # DPO moved the members: their margins on the held-out pairs changed
    wide = acc.pivot_table(index="member", columns="when", values="mean_margin")
    assert (wide["before"] != wide["after"]).all()
    assert (run / "report/training.png").read_bytes()[:4] == b"\x89PNG"


def _answers(model, tok, prompts):
    from sparta.backends.hf import generate
    from sparta.chat import chat_ids
    from sparta.settings import Sampling

    ids = [chat_ids(tok, p, "You are a helpful AI assistant.") for p in prompts]
    return [g.text for g in generate(model, tok, ids, Sampling.greedy_decoding(8), [0] * len(ids))]


def _want(spec, prompts):
    from sparta.backends import open_backend
    from sparta.chat import chat_ids
    from sparta.settings import BackendSettings, Runtime, Sampling

    inside = open_backend(BackendSettings("hf"), Runtime(device="cpu"), [spec]).serve(spec)
    ids = [chat_ids(inside.tok, p, "You are a helpful AI assistant.") for p in prompts]
    return [g.text for g in inside.generate(ids, Sampling.greedy_decoding(8), [0] * len(ids))]


PROMPTS = ["What is 3 + 4?", "Tom has 5 apples and gets 2 more.", "What is 6 * 7?"]


RUN_UMASK = umask()  # the umask the run fixtures write under (read before any test changes it)


def _modes(folder):
    return {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}


@pytest.fixture
def umask_002():
    """A umask under which the library default 0600 and a hard-coded 0644 both show."""
    import os

    old = os.umask(0o002)
    yield
    os.umask(old)


def test_export_adapter_and_merged_answer_as_the_member_in_the_run(
    run_a, tmp_path, capsys, monkeypatch, umask_002
):
    from peft import AutoPeftModelForCausalLM, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sparta.cli import main
    from sparta.export import folder_digest
    from sparta.members import MemberSpec

    run = (run_a[0] / EXP).resolve()
    spec = MemberSpec.read(run / "iter_2/members/bob/member.json")
    want = _want(spec, PROMPTS)
    # the run's own adapters too: safetensors writes 0600, the training job gives the umask's
    assert set(_modes(Path(spec.adapter)).values()) == {0o666 & ~RUN_UMASK}

    assert main(["export", str(run), str(tmp_path / "adapter"), "--member", "bob", "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["checkpoint"] == 2 and not written["merged"]
    config = json.loads((tmp_path / "adapter/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == spec.base and spec.base.startswith("/")
    recorded = yaml.safe_load((tmp_path / "adapter/sparta_export.yaml").read_text())
    assert recorded["base_sha256"] == folder_digest(spec.base) == written["base_sha256"]
    assert set(_modes(tmp_path / "adapter").values()) == {0o664}  # the umask's, not 0600
    # loads by the folder alone, from a working directory that has nothing of the run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    adapter = AutoPeftModelForCausalLM.from_pretrained(str(tmp_path / "adapter")).eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "adapter")
    assert _answers(adapter, tok, PROMPTS) == want
    base = AutoModelForCausalLM.from_pretrained(spec.base)
    assert _answers(PeftModel.from_pretrained(base, tmp_path / "adapter").eval(), tok, PROMPTS) == want

    assert main(["export", str(run), str(tmp_path / "merged"), "--member", "bob", "--merge"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["dtype"] == "float32"  # the run's: auto on CPU
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in k for k in merged.state_dict())
    assert _answers(merged, AutoTokenizer.from_pretrained(tmp_path / "merged"), PROMPTS) == want
    assert set(_modes(tmp_path / "merged").values()) == {0o664}
    card = (tmp_path / "merged" / "README.md").read_text()
    assert (
        "bob" in card
        and "iteration 2" in card
        and "## Evaluation" in card
        and "## Settings of the run" in card
    )

    # another dtype, small shards: a sharded safetensors folder in bf16 with the same weights
    argv = ["export", str(run), str(tmp_path / "bf16"), "--member", "bob", "--merge"]
    assert main([*argv, "--dtype", "bfloat16", "--max-shard-size", "40KB"]) == 0
    capsys.readouterr()
    shards = sorted((tmp_path / "bf16").glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and (tmp_path / "bf16/model.safetensors.index.json").is_file()
    half = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype="auto")
    assert next(half.parameters()).dtype == torch.bfloat16
    full = merged.state_dict()
    for k, v in half.state_dict().items():
        assert torch.allclose(v.float(), full[k], rtol=1e-2, atol=1e-2), k

    assert main(["export", str(run), str(tmp_path / "best"), "--best", "arith", "--merge"]) == 0
    capsys.readouterr()
    sel = pd.read_parquet(run / "evaluation/selection.parquet")
    best = sel[sel["stage"] == ("selected" if (sel["stage"] == "selected").any() else "best final")].iloc[0]
    assert f"checkpoint {int(best['checkpoint'])}" in (tmp_path / "best" / "README.md").read_text()
    for argv in (
        ["export", str(run), str(tmp_path / "x"), "--member", "nobody"],
        ["export", str(run), str(tmp_path / "adapter"), "--member", "bob"],  # not empty
        ["export", str(run), str(tmp_path / "y"), "--best", "no-such-task"],
        ["export", str(run), str(tmp_path / "z"), "--member", "bob", "--base-id", "not an id"],
        ["export", str(run), str(tmp_path / "w"), "--member", "bob", "--push", "me/bob"],  # no hub base
    ):
        assert main(argv) == 2
        assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "w").exists()


def test_model_card_passes_hub_metadata_parsing_and_says_what_the_member_is(run_a, tmp_path, capsys):
    from huggingface_hub import ModelCard

    from sparta.cli import main
    from sparta.metrics import wilson_interval

    run = (run_a[0] / EXP).resolve()
    sel = pd.read_parquet(run / "evaluation/selection.parquet")
    stage = "selected" if (sel["stage"] == "selected").any() else "best final"
    best = sel[(sel["task"] == "arith") & (sel["stage"] == stage)].iloc[0]
    assert main(["export", str(run), str(tmp_path / "best"), "--best", "arith", "--merge"]) == 0
    capsys.readouterr()
    text = (tmp_path / "best" / "README.md").read_text()
    card = ModelCard(text, ignore_metadata_errors=False)
    meta = card.data.to_dict()
    assert {"sparta", "merged"} <= set(meta["tags"]) and meta["library_name"] == "transformers"
    assert "base_model" not in meta  # a local base is no hub id: named in the text, not the metadata
    assert str(Path(_spec_of(run, best).base)) in card.text
    # the selection and its tie, counted here from the scores
    scores = pd.read_parquet(run / "evaluation/scores.parquet").query(
        "task == 'arith' and split == 'validation'"
    )
    if stage == "best final":
        scores = scores[scores["checkpoint"] == scores["checkpoint"].max()]
    tied = int((scores["score"] == best["validation"]).sum())
    words = "the run's selected member" if stage == "selected" else "the best final member"
    assert words in card.text
    assert (f"a {tied}-way tie on validation" in card.text) == (tied > 1)
    assert ("no tie on validation" in card.text) == (tied == 1)
    # the scores with n and a Wilson interval
    mine = pd.read_parquet(run / "evaluation/scores.parquet")
    mine = mine[(mine["member"] == best["member"]) & (mine["checkpoint"] == best["checkpoint"])]
    for r in mine.itertuples(index=False):
        low, high = wilson_interval(round(r.score * r.n), r.n)
        assert (
            f"| {r.task} | {r.metric} | {r.split} | {r.score:.4f} | {low:.4f} to {high:.4f} | {r.n} |" in text
        )

    # --base-id names a public base: the adapter points to it, the card's metadata too
    argv = ["export", str(run), str(tmp_path / "named"), "--member", "bob", "--base-id", "acme/tiny-base"]
    assert main(argv) == 0
    capsys.readouterr()
    config = json.loads((tmp_path / "named/adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "acme/tiny-base"
    meta = ModelCard((tmp_path / "named/README.md").read_text(), ignore_metadata_errors=False).data
    assert meta.base_model == "acme/tiny-base" and meta.to_dict()["base_model_relation"] == "adapter"


def _spec_of(run, row):
    from sparta.members import MemberSpec

    return MemberSpec.read(run / f"iter_{int(row['checkpoint'])}/members/{row['member']}/member.json")


def test_push_uploads_the_exported_folder_with_huggingface_hub(run_a, tmp_path, capsys, monkeypatch):
    """Offline: huggingface_hub's repository and upload calls are replaced by recorders; what
    reaches them is what would be uploaded."""
    import huggingface_hub
    from huggingface_hub import constants

    from sparta.cli import main

    calls = []

    def create_repo(self, repo_id, **kw):
        calls.append(("create", repo_id, kw, constants.is_offline_mode()))

    def upload_folder(self, *, repo_id, folder_path, **kw):
        files = sorted(p.name for p in Path(folder_path).iterdir())
        calls.append(("upload", repo_id, {**kw, "files": files}, constants.is_offline_mode()))
        return huggingface_hub.CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/0",
            commit_message="",
            commit_description="",
            oid="0",
        )

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    offline = constants.HF_HUB_OFFLINE
    run = (run_a[0] / EXP).resolve()
    argv = ["export", str(run), str(tmp_path / "up"), "--member", "bob", "--base-id", "acme/tiny-base"]
    assert main([*argv, "--push", "me/bob-sparta", "--private", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pushed"] == "https://huggingface.co/me/bob-sparta/commit/0"
    (create, repo, kw, was_offline), (upload, repo2, kw2, was_offline2) = calls
    assert (create, repo, kw["private"], kw["exist_ok"]) == ("create", "me/bob-sparta", True, True)
    assert (upload, repo2) == ("upload", "me/bob-sparta") and not was_offline and not was_offline2
    assert {"README.md", "adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= set(
        kw2["files"]
    )
    assert constants.HF_HUB_OFFLINE == offline  # sparta's offline default is back after the upload


HANDOFF_PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "handoff.md"


def _handoff_blocks():
    """The hand-off page's commands (the last bash block before its marker) and its Python
    snippet (the first block after it)."""
    import re

    page = HANDOFF_PAGE.read_text()
    before, after = page.split("<!-- trl-handoff -->")
    commands = re.findall(r"```bash\n(.*?)```", before, re.S)[-1]
    snippet = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    return [line for line in commands.splitlines() if line.strip()], snippet


def test_docs_trl_handoff_runs_as_written_and_trains_as_sparta_did(run_a, tmp_path, monkeypatch):
    """The docs' hand-off (docs/guides/handoff.md): export a member, write the pairs in TRL's
    conversational form,
    train on with the run's DPOConfig. The tiny run stands as results/default (on CPU) and its
    member ann for adder; the Python snippet runs exactly as written."""
    import shlex
    import subprocess
    import sys

    from datasets import load_dataset
    from safetensors.torch import load_file
    from trl.data_utils import is_conversational

    from sparta.cli import main
    from sparta.train import pairs_of

    run = (run_a[0] / EXP).resolve()
    (tmp_path / "results").mkdir()
    (tmp_path / "results/default").symlink_to(run)
    monkeypatch.chdir(tmp_path)
    commands, snippet = _handoff_blocks()
    for line in commands:
        argv = shlex.split(line.split("#")[0].replace("--member adder", "--member ann"))
        assert argv[0] == "sparta" and main(argv[1:]) == 0, line

    # the pairs as sparta's DPO gave them: the run's system prompt, the user prompt, one answer
    prefs = pd.read_parquet(run / "iter_2/preferences.parquet")
    data = load_dataset("parquet", data_files="out/pairs.parquet", split="train")
    assert len(data) == len(prefs) > 0 and set(data.column_names) == {"prompt", "chosen", "rejected"}
    assert is_conversational(data[0])
    system = yaml.safe_load((run / "settings.yaml").read_text())["system_prompt"]
    for row, p in zip(data, prefs.itertuples(index=False)):
        assert row["prompt"] == [{"role": "system", "content": system}, {"role": "user", "content": p.prompt}]
        assert row["chosen"] == [{"role": "assistant", "content": p.chosen}]
        assert row["rejected"] == [{"role": "assistant", "content": p.rejected}]

    # the pairs a member trains on (Sparta: every pair; a baseline: its own)
    assert main(["pairs", "results/default/iter_2", "--trainee", "ann", "--trl", "out/ann.parquet"]) == 0
    assert len(pd.read_parquet("out/ann.parquet")) == len(pairs_of(prefs, "ann")) == len(prefs)

    proc = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    before = load_file("out/adder/adapter_model.safetensors")
    after = load_file("out/adder-dpo/adapter_model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    trained = json.loads(Path("out/adder-dpo/adapter_config.json").read_text())
    assert (
        trained["base_model_name_or_path"]
        == json.loads(Path("out/adder/adapter_config.json").read_text())["base_model_name_or_path"]
    )


def test_trackers_are_off_unless_asked():
    assert Tracking().args("ann") == {"report_to": []}
    on = Tracking(report_to=("wandb",), project="p", run_name="exp/iter_1").args("ann")
    assert on == {"report_to": ["wandb"], "run_name": "exp/iter_1/ann", "project": "p"}
