"""Planning: the rules that can produce a file, found by the outputs' constant suffixes
(sparta/planning.py), are Snakemake's own answer; and the rules a study's pools and round
counts get."""

import os
import re
import subprocess
import sys

from sparta.planning import CHECK_VARIABLE

from .test_study import study_config
from .workflow_helpers import REPO, write_config


def _plan(workdir, configfile, env=None):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-q", "rules", "-s", str(REPO / "Snakefile")]
        + ["-d", str(workdir), "--configfile", str(configfile)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, flags=re.M))


def test_the_suffix_index_finds_snakemake_s_producers_for_every_file(tmp_path, tiny_base):
    """A study with three pools (the shared initial pool, the experiments' and another), an
    experiment of two rounds per iteration beside runs of one, under fanout pool and member:
    every lookup of the plan asks both indexes (a difference stops the plan), and the plan
    is the same with either."""
    cfg = study_config(tiny_base, methods=("sparta", "spin"), other_pool=True)
    cfg["study"]["experiments"]["two_rounds"] = {"matchmaking": {"rounds_per_iteration": 2}}
    for fanout in ("pool", "member"):
        cfg["fanout"] = cfg["dpo_fanout"] = fanout
        config = write_config(tmp_path / fanout, cfg)
        checked, counts = _plan(tmp_path / fanout / "work", config, {CHECK_VARIABLE: "1"})
        lookups = int(re.search(r"output index checked on (\d+) lookups", checked.stderr).group(1))
        assert lookups > 100, checked.stderr[-2000:]
        plain, plain_counts = _plan(tmp_path / fanout / "work", config)
        assert plain_counts == counts and "output index checked" not in plain.stderr
        if fanout == "pool":  # a rule per pool and per round count, one job per round each
            pooled = {rule.rsplit("_pool", 1)[0] for rule in counts if re.fullmatch(r"\w+_pool\d+", rule)}
            assert {"combat", "judge", "dpo", "evaluate_member"} <= pooled, counts
            assert {"aggregate_rounds2", "aggregate_round_rounds2"} <= set(counts), counts
            assert counts["aggregate_rounds2"] == counts["aggregate_round_rounds2"] == "1"
        else:
            assert not any("_pool" in rule for rule in counts)
        assert "gather_preferences" not in counts
