"""A finished run and new settings under its name (sparta/finished.py): the settings that differ
are named as dotted keys, keys that change no output never count, and a dry run over a
finished-looking run folder (its settings.yaml written by the workflow, the final state and
last checkpoints by hand: the check reads only those) stops naming the key, plans with
replace_finished, and plans with nothing to say when the settings are the same."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from sparta import finished, layout
from sparta.settings import Settings

from .workflow_helpers import REPO, run_snakemake, tiny_config, write_config


def _settings(**change) -> Settings:
    return Settings.from_config(tiny_config(Path("/models/tiny"), **change))


def _recorded(**change) -> dict:
    """What settings.yaml holds for these settings."""
    return yaml.safe_load(yaml.safe_dump(finished.recorded(_settings(**change)), sort_keys=False))


def _finish(root: Path, run: str, members=("ann", "bob", "cid"), iterations=2) -> None:
    """What the check takes for a finished run: the final state and every member's last
    checkpoint (the settings.yaml is the caller's)."""
    folder = root / layout.run_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"member": list(members)}).to_parquet(folder / finished.FINAL_STATE)
    for t in range(1, iterations + 1):
        for m in members:
            path = root / layout.member_json(run, t, m)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")


def test_the_settings_that_differ_are_named_and_keys_that_change_no_output_are_not():
    old = _recorded()
    assert finished.differences(old, _settings()) == []
    new = _settings(
        judge={"max_length": 256},
        members=[
            {"name": "ann", "base": "tiny", "sft_domain": "subtraction"},
            {"name": "bob", "base": "tiny", "sft_domain": "multiplication"},
            {"name": "cid", "base": "tiny"},
        ],
        train={"report_to": ["tensorboard"], "project": "elsewhere"},
        resources={"dpo": {"runtime": 30, "gpu": 0}},
        baselines={"spin_history": 3},  # no Sparta job reads them
        replace_finished=True,
    )
    assert finished.differences(old, new) == [
        ("members[0].sft_domain", "addition", "subtraction"),
        ("judge.max_length", 512, 256),
    ]
    # baselines count in a baseline's run
    spin = finished.differences(
        _recorded(method="spin"), _settings(method="spin", baselines={"spin_history": 3})
    )
    assert spin == [("baselines.spin_history", 2, 3)]


def test_a_setting_added_or_removed_since_the_run_was_made_counts_only_when_set_otherwise():
    """settings.yaml of an older sparta: a key it lacks has its default (what the run used), a
    key sparta no longer has is left out (no job reads it)."""
    old = _recorded()
    del old["judge"]["fence"]  # not yet a setting then; the current default
    old["judge"]["retired"] = 3  # a setting since removed
    old["from_embedded_default"] = ["dpo_fanout 'member' (default None)"]
    assert finished.differences(old, _settings()) == []
    assert finished.differences(old, _settings(judge={"fence": False})) == [("judge.fence", True, False)]


def test_a_run_is_finished_once_its_final_state_and_last_checkpoints_are_there(tmp_path):
    old = _recorded()
    folder = tmp_path / layout.run_dir("tiny")
    folder.mkdir(parents=True)
    assert not finished.is_finished(folder, old)
    _finish(tmp_path, "tiny", members=("ann", "bob"))  # cid's last checkpoint is missing
    assert not finished.is_finished(folder, old)
    _finish(tmp_path, "tiny")
    assert finished.is_finished(folder, old)
    holds, files = finished.contents(folder, old)
    assert holds == "checkpoints iter_1..iter_2 of 3 members" and files == 7


def test_the_message_names_each_run_the_keys_and_the_two_ways_on(tmp_path):
    """A study's seeds of one experiment changed alike are one group; the switch lets them go."""
    runs = {f"study/sparta-seed{s}": _settings(experiment=f"study/sparta-seed{s}") for s in (1, 2)}
    runs["study/spin-seed1"] = _settings(experiment="study/spin-seed1", method="spin")
    for run, s in runs.items():
        _finish(tmp_path, run)
        (tmp_path / layout.run_dir(run) / layout.SETTINGS).write_text(yaml.safe_dump(finished.recorded(s)))
    assert finished.check(runs, tmp_path) == []
    changed = {
        run: Settings.from_config({**finished.recorded(s), "iterations": 3}) for run, s in runs.items()
    }
    try:
        finished.check(changed, tmp_path)
    except finished.FinishedRunChanged as e:
        text = str(e)
    else:
        raise AssertionError("a changed finished study ran on")
    assert (
        "3 finished runs (results/study/sparta-seed1, results/study/sparta-seed2, results/study/spin-seed1;"
        in text
    )
    assert "iterations: 2 -> 3" in text
    assert "--config replace_finished=true" in text and "--config experiment=<new name>" in text
    heading = text.splitlines()[0].split(";")[0]  # what the troubleshooting page quotes
    assert heading in (REPO / "docs/guides/troubleshooting.md").read_text()
    replace = {
        run: Settings.from_config({**finished.recorded(s), "replace_finished": True})
        for run, s in changed.items()
    }
    assert len(finished.check(replace, tmp_path)) == 3


def test_replace_finished_given_on_the_command_line_is_read_as_a_boolean():
    assert finished.read_switch({"replace_finished": "true"}) == {"replace_finished": True}
    assert finished.read_switch({"replace_finished": "False"}) == {"replace_finished": False}
    # anything else is left to the schema to refuse
    assert finished.read_switch({"replace_finished": "maybe"}) == {"replace_finished": "maybe"}


@pytest.mark.slow
def test_a_dry_run_over_a_finished_run_with_other_settings_stops_naming_the_key(tiny_base, tmp_path):
    work = tmp_path / "work"
    same = write_config(tmp_path / "same", tiny_config(tiny_base))
    run_snakemake(work, same, "results/tiny/settings.yaml")  # a local rule, no model: the record
    _finish(work, "tiny")
    recorded = (work / "results/tiny/settings.yaml").read_text()

    changed = write_config(tmp_path / "changed", tiny_config(tiny_base, judge={"max_length": 256}))
    stopped = run_snakemake(work, changed, "-n", check=False)
    said = stopped.stdout + stopped.stderr  # Snakemake prints the error to stdout
    assert stopped.returncode != 0
    assert "results/tiny holds a finished run" in said, said[-3000:]
    assert "judge.max_length: 512 -> 256" in said and "--config replace_finished=true" in said

    replaced = run_snakemake(work, changed, "-n", "--config", "replace_finished=true")
    assert "sparta: note: replacing the finished run results/tiny" in replaced.stderr
    assert "rule record_settings:" in replaced.stdout

    again = run_snakemake(work, same, "-n")
    assert "finished run" not in again.stdout + again.stderr
    assert (work / "results/tiny/settings.yaml").read_text() == recorded  # dry runs wrote nothing
