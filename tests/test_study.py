"""A study on tiny models: Sparta and the four baselines, one seed, in one DAG, with the
initial pool shared; then the comparison and the inference each method spent."""

import re
import subprocess
import sys

import pandas as pd
import pytest

from sparta import tables

from .tiny import build_tiny_model
from .workflow_helpers import REPO, run_snakemake, tiny_config, write_config

pytestmark = pytest.mark.slow
METHODS = ("sparta", "self_rewarding", "meta_rewarding", "spin", "sppo")
# the analyses and figures once per kind of run they differ for: Sparta (its judges' label
# accuracy), a baseline with two answers per prompt, SPIN (no two answers to compare); each
# analysis job costs a model job's imports
ANALYZED = ("sparta", "self_rewarding", "spin")


def study_config(base, methods=METHODS, seeds=(3,), other_pool=False) -> dict:
    cfg = tiny_config(
        base,
        "tiny-study",
        iterations=1,
        prompts={"per_iteration": 3, "reference_column": "solution"},
        # the additive self-rewarding prompt (the paper's text, the default) is over 1,000
        # tokens on the tiny model's near character-level tokenizer (350 on SmolLM2's): a
        # budget that fits it, on a base of that context (study_base)
        judge={"max_new_tokens": 6, "max_length": 2048},
        baselines={"samples": 2},
        evaluation={"checkpoints": "final", "select_from": "final"},
    )
    cfg["study"] = {"seeds": list(seeds), "experiments": {m: {"method": m} for m in methods}}
    if other_pool:  # another pool (Figure 3's pool sizes): two of the members and a plain fourth
        other = [*cfg["members"][:2], {"name": "dan", "base": "tiny"}]
        cfg["study"]["experiments"]["spin_other"] = {"method": "spin", "members": other}
    return cfg


@pytest.fixture(scope="module")
def study_base(tmp_path_factory):
    """The tiny base with a context of 2,048 tokens (the judge budget of study_config)."""
    return build_tiny_model(tmp_path_factory.mktemp("study_base") / "model", context=2048)


@pytest.fixture(scope="module")
def study(tmp_path_factory, study_base):
    root = tmp_path_factory.mktemp("study")
    cfg = study_config(study_base, other_pool=True)
    for name, overlay in cfg["study"]["experiments"].items():
        if name not in ANALYZED:
            overlay["analysis"] = {"enabled": False}
    proc = run_snakemake(root / "work", write_config(root, cfg), timeout=2400)
    return root / "work" / "results" / "tiny-study", proc


def test_every_method_writes_the_same_tables(study):
    out, _ = study
    for method in METHODS:
        run = out / f"{method}-seed3"
        prefs = tables.read(run / "iter_1/preferences.parquet", "preferences")
        responses = tables.read_many(
            sorted((run / "iter_1/round_0/responses").glob("*.parquet")), "responses"
        )
        for member in ("ann", "bob", "cid"):
            assert (run / f"iter_1/members/{member}/adapter/adapter_model.safetensors").is_file(), (
                method,
                member,
            )
        assert (run / "evaluation/selection.tsv").is_file()
        assert (run / "report/training.png").is_file() == (method in ANALYZED), method
        if method in ANALYZED:  # every pair trained on is counted, and none of equal texts is
            counted = tables.read(run / "analysis/pairs.parquet", "pairs")
            assert counted.set_index("iteration")["pairs"].get(1) == len(prefs), method
            assert (counted["identical"] >= 0).all()
        if method == "sparta":
            assert prefs["trainee"].isna().all() and (responses["sample"] == 0).all()
            continue
        assert set(prefs["trainee"].dropna()) <= {"ann", "bob", "cid"} and prefs["trainee"].notna().all()
        assert (prefs["chosen_member"] == prefs["trainee"]).all()
        samples = 1 if method == "spin" else 2
        assert responses.groupby(["duel_id", "member"]).size().eq(samples).all(), method
    spin = tables.read(out / "spin-seed3/iter_1/preferences.parquet", "preferences")
    duels = tables.read(out / "spin-seed3/iter_1/round_0/duels.parquet", "duels")
    assert set(spin["chosen"]) <= set(duels["reference"])  # SPIN's chosen: the reference solutions
    judged = tables.read_many(
        sorted((out / "meta_rewarding-seed3/iter_1/round_0/judgments").glob("*")), "judgments"
    )
    assert {"score", "meta"} <= set(judged["kind"])
    sppo = tables.read_many(sorted((out / "sppo-seed3/iter_1/round_0/judgments").glob("*")), "judgments")
    assert set(sppo["judge"]) == {"annotator"} and sppo["score"].between(1, 10).all()


def test_the_initial_pool_is_built_once_per_seed(study, study_base, tmp_path):
    out, proc = study
    shared = out / "_init-seed3"
    assert (shared / "iter_0/members/ann/adapter/adapter_model.safetensors").is_file()
    assert not any((out / f"{m}-seed3" / "iter_0" / "members").exists() for m in METHODS)
    assert len(list((shared / "evaluation/checkpoint_0").glob("*.parquet"))) == 4  # and spin_other's dan
    # a study of two experiments and two seeds: two SFT members, so 4 SFT jobs, not 8
    cfg = write_config(tmp_path, study_config(study_base, ("sparta", "spin"), seeds=(1, 2)))
    dry = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-q",
            "rules",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path / "w"),
            "--configfile",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", dry.stdout, flags=re.M))
    assert counts["sft_member"] == "4" and counts["evaluate_member"] == str(2 + 4)
    # resuming: nothing to do once finished
    again = run_snakemake(out.parent.parent, proc.args[proc.args.index("--configfile") + 1], "-n")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_another_pool_is_served_by_jobs_of_its_own(study):
    """fanout pool in a study with another pool: the pool most runs use is served one job
    per round, DPO and evaluation (the plain rules); the other pool's run, and the shared
    initial pool that holds both pools' members, by rules of their own (<stage>_pool2 ...: a
    rule's outputs are fixed), one job per round, DPO and checkpoint too; the other run starts
    from the shared pool and its evaluation."""
    out, proc = study
    other = out / "spin_other-seed3"
    for kind in ("responses", "judgments"):
        found = sorted(p.stem for p in (other / "iter_1/round_0" / kind).glob("*.parquet"))
        assert found == ["ann", "bob", "dan"], (kind, found)
    assert sorted(p.name for p in (other / "iter_1/members").iterdir()) == ["ann", "bob", "dan"]
    evaluated = sorted(p.stem for p in (other / "evaluation/checkpoint_1").glob("*.parquet"))
    assert evaluated == ["ann", "bob", "dan"]
    assert (other / "logs/iter_1/round_0/combat_pool.log").is_file()
    assert (out / "sparta-seed3/logs/iter_1/round_0/combat_pool.log").is_file()
    assert (out / "_init-seed3/logs/evaluation/checkpoint_0/evaluate_pool.log").is_file()
    assert not (other / "iter_0/members").exists()  # checkpoint 0 and its evaluation: the shared run's
    ran = set(re.findall(r"^(?:local)?rule (\w+):", proc.stdout + proc.stderr, flags=re.M))
    pools = {rule.rsplit("_pool", 1)[0] for rule in ran if re.fullmatch(r"\w+_pool\d+", rule)}
    assert {"combat", "judge", "dpo", "evaluate_member"} <= pools, sorted(ran)
    assert {"combat", "judge", "dpo", "evaluate_member"} <= ran
    selection = pd.read_csv(other / "evaluation/selection.tsv", sep="\t")
    assert set(selection["member"].dropna()) <= {"ann", "bob", "dan"}


def test_comparison_and_cost(study, capsys):
    from sparta.cli import main

    out, _ = study
    table = tables.read(out / "comparison.parquet", "comparison")
    # the run with another pool is compared with its own pool's best initial member
    assert set(table["experiment"]) == {"best init", *METHODS, "spin_other", "best init (spin_other)"}
    assert table["test"].between(0, 1).all() and (table["items"] > 0).all()
    sparta = table.set_index("experiment").loc["sparta"]
    assert sparta["vs_best_init_low"] <= sparta["vs_best_init"] <= sparta["vs_best_init_high"]
    cost = tables.read(out / "cost.parquet", "cost").set_index("experiment")
    assert cost.loc["spin", "tokens_judged"] == 0 and cost.loc["sparta", "tokens_judged"] > 0
    assert cost.loc["self_rewarding", "answers"] == 2 * 3 * 3  # 2 samples x 3 prompts x 3 members
    assert cost.loc["sparta", "answers"] == 2 * 3  # two combatants per prompt
    # requests (expected mode): a self-judgment each answer; SPPO's one comparison of 2 answers
    # in both orders; meta-rewarding adds 3 sampled judgments + 6 meta-judge orders per prompt
    assert cost.loc["self_rewarding", "judge_requests"] == 2 * 3 * 3
    assert cost.loc["sppo", "judge_requests"] == 2 * 3 * 3 and cost.loc["spin", "judge_requests"] == 0
    assert 2 * 3 * 3 < cost.loc["meta_rewarding", "judge_requests"] <= 2 * 3 * 3 + 9 * 3 * 3
    assert cost.loc["meta_rewarding", "judge_tokens_generated"] > 0
    assert main(["compare", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "vs best init" in printed and "tokens_generated" in printed
    assert (pd.read_csv(out / "comparison.tsv", sep="\t")["experiment"] == table["experiment"]).all()
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"  # the report's figure
