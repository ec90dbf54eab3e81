"""What DPO learned, and handing a member off: training logs as tables, held-out preference
accuracy, `sparta export` (adapter and merged), preference sets as Hugging Face datasets.
On the shared tiny run (run_a)."""

import json

import pandas as pd
import pytest
import torch

from sparta import tables
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
    gathered = tables.read(run / "analysis/training.parquet", "training_log")
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


def test_export_adapter_and_merged_answer_as_the_member_in_the_run(run_a, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sparta.backends import open_backend
    from sparta.cli import main
    from sparta.members import MemberSpec
    from sparta.settings import BackendSettings, Runtime

    run = run_a[0] / EXP
    prompts = ["What is 3 + 4?", "Tom has 5 apples and gets 2 more.", "What is 6 * 7?"]
    spec = MemberSpec.read(run / "iter_2/members/bob/member.json")
    inside = open_backend(BackendSettings("hf"), Runtime(device="cpu"), [spec]).serve(spec)
    from sparta.chat import chat_ids
    from sparta.settings import Sampling

    ids = [chat_ids(inside.tok, p, "You are a helpful AI assistant.") for p in prompts]
    want = [g.text for g in inside.generate(ids, Sampling.greedy_decoding(8), [0] * 3)]

    assert main(["export", str(run), str(tmp_path / "adapter"), "--member", "bob", "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["checkpoint"] == 2 and not written["merged"]
    base = AutoModelForCausalLM.from_pretrained(spec.base)
    adapter = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "adapter")
    assert _answers(adapter, tok, prompts) == want

    assert main(["export", str(run), str(tmp_path / "merged"), "--member", "bob", "--merge"]) == 0
    capsys.readouterr()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in k for k in merged.state_dict())
    assert _answers(merged, AutoTokenizer.from_pretrained(tmp_path / "merged"), prompts) == want
    card = (tmp_path / "merged" / "README.md").read_text()
    assert (
        "bob" in card
        and "iteration 2" in card
        and "## Evaluation" in card
        and "## Settings of the run" in card
    )

    assert main(["export", str(run), str(tmp_path / "best"), "--best", "arith"]) == 0
    capsys.readouterr()
    best = pd.read_parquet(run / "evaluation/selection.parquet").query("stage == 'best final'").iloc[0]
    assert f"checkpoint {int(best['checkpoint'])}" in (tmp_path / "best" / "README.md").read_text()
    for argv in (
        ["export", str(run), str(tmp_path / "x"), "--member", "nobody"],
        ["export", str(run), str(tmp_path / "adapter"), "--member", "bob"],  # not empty
        ["export", str(run), str(tmp_path / "y"), "--best", "no-such-task"],
    ):
        assert main(argv) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_a_preference_set_is_a_dataset_trl_trains_on(run_a, tmp_path):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    run = run_a[0] / EXP
    data = load_dataset("parquet", data_files=str(run / "iter_1/preferences.parquet"), split="train")
    assert {"prompt", "chosen", "rejected"} <= set(data.column_names) and len(data) > 0
    base = json.loads((run / "iter_0/members/cid/member.json").read_text())["base"]
    tok = AutoTokenizer.from_pretrained(base)
    args = DPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        max_length=128,
    )
    model = AutoModelForCausalLM.from_pretrained(base)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok).train()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_trackers_are_off_unless_asked():
    assert Tracking().args("ann") == {"report_to": []}
    on = Tracking(report_to=("wandb",), project="p", run_name="exp/iter_1").args("ann")
    assert on == {"report_to": ["wandb"], "run_name": "exp/iter_1/ann", "project": "p"}
