"""Planning: the rules that can produce a file, found by the outputs' constant suffixes
(sparta/engine/planning.py), are Snakemake's own answer; rule all's short target (rules/common.smk,
target_of) plans the same jobs as every artifact asked for; and the rules a study's pools and
round counts get."""

import os
import re
import subprocess
import sys

import pytest

from sparta.engine.planning import CHECK_VARIABLE

from .test_study import study_config
from .workflow_helpers import REPO, write_config


def _plan(workdir, configfile, env=None):
    """The dry run, its job count per rule and the outputs of every job it plans."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile")]
        + ["-d", str(workdir), "--configfile", str(configfile)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, flags=re.M))
    listed = re.findall(r"^\s+output: (.*)$", proc.stdout, flags=re.M)
    outputs = {f for line in listed for f in line.split(", ")}
    return proc, counts, outputs


@pytest.mark.slow
def test_the_suffix_index_finds_snakemake_s_producers_for_every_file(tmp_path, tiny_base):
    """A study with three pools (the shared initial pool, the experiments' and another), an
    experiment of two rounds per iteration beside runs of one, under fanout pool and member:
    every lookup of the plan asks both indexes (a difference stops the plan), and the plan
    is the same with either. The checked plan asks for every artifact of every run
    (SPARTA_FULL_TARGET=1), the plain one for rule all's short target: the same jobs."""
    cfg = study_config(tiny_base, methods=("sparta", "spin"), other_pool=True)
    cfg["judge"]["max_length"] = 1024  # the tiny base's context (a plan runs no judge)
    cfg["study"]["experiments"]["two_rounds"] = {"matchmaking": {"rounds_per_iteration": 2}}
    for fanout in ("pool", "member"):
        cfg["fanout"] = cfg["dpo_fanout"] = fanout
        config = write_config(tmp_path / fanout, cfg)
        checked, counts, outputs = _plan(
            tmp_path / fanout / "work", config, {CHECK_VARIABLE: "1", "SPARTA_FULL_TARGET": "1"}
        )
        lookups = int(re.search(r"output index checked on (\d+) lookups", checked.stderr).group(1))
        assert lookups > 100, checked.stderr[-2000:]
        plain, plain_counts, plain_outputs = _plan(
            tmp_path / fanout / "work", config, {"SPARTA_FULL_TARGET": "0"}
        )
        assert plain_counts == counts and "output index checked" not in plain.stderr
        assert len(outputs) > 200 and plain_outputs == outputs, sorted(outputs ^ plain_outputs)[:20]
        if fanout == "pool":  # a rule per pool and per round count, one job per round each
            pooled = {rule.rsplit("_pool", 1)[0] for rule in counts if re.fullmatch(r"\w+_pool\d+", rule)}
            assert {"combat", "judge", "dpo", "evaluate_member"} <= pooled, counts
            assert {"aggregate_rounds2", "aggregate_round_rounds2"} <= set(counts), counts
            assert counts["aggregate_rounds2"] == counts["aggregate_round_rounds2"] == "1"
        else:
            assert not any("_pool" in rule for rule in counts)
        assert "gather_preferences" not in counts
