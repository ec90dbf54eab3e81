"""Planning: the rules that can produce a file, found by the outputs' constant suffixes
(sparta/engine/planning.py), are Snakemake's own answer; rule all's short target (rules/common.smk,
target_of) plans the same jobs as every artifact asked for; and the rules a study's pools and
round counts get."""

import os
import re
import subprocess
import sys

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


def test_signatures_are_remembered_per_function_as_snakemake_reads_them():
    """The cache behind Snakemake's get_function_params: the same parameters as
    inspect.signature, looked up once per function; a function Snakemake overwrote keeps its
    overwritten list; installed where Snakemake looks the function up."""
    import inspect

    import snakemake.common
    import snakemake.rules

    from sparta.engine import planning

    def needs_input(wildcards, input, threads=1):
        return []

    params = planning._cached_function_params(needs_input)
    assert list(params) == ["wildcards", "input", "threads"]
    assert params == inspect.signature(needs_input).parameters
    assert planning._cached_function_params(needs_input) is params  # remembered
    snakemake.common.overwrite_function_params(needs_input, ["wildcards"])
    assert planning._cached_function_params(needs_input) == ["wildcards"]
    planning.install()
    aux = snakemake.common.get_input_function_aux_params(
        lambda wildcards, **kw: [], {"input": 1, "output": 2}
    )
    assert aux == {"input": 1, "output": 2}  # a **kwargs function takes every aux param, as before
    assert snakemake.rules.get_function_params is planning._cached_function_params
    assert snakemake.common.get_function_params is planning._cached_function_params


class _Job:
    """What DAG.check_directory_outputs reads of a job: its outputs, order and identity."""

    def __init__(self, name, *output):
        self.name, self.output = name, list(output)

    def __lt__(self, other):
        return self.name < other.name

    def __repr__(self):
        return self.name


def test_the_directory_output_check_answers_as_snakemake_s(tmp_path, monkeypatch):
    """sparta.engine.planning.check_directory_outputs against Snakemake's own method on the same
    jobs: nested outputs of two jobs (stops, naming both), of one job (passes), siblings,
    a name that only starts like a folder, relative and absolute spellings of one folder,
    "." components and a file two jobs write."""
    import types

    import snakemake.api  # noqa: F401  (before snakemake.dag: a circular import otherwise)
    from snakemake.dag import DAG
    from snakemake.exceptions import ChildIOException

    from sparta.engine import planning

    monkeypatch.chdir(tmp_path)
    planning.install()
    assert DAG.check_directory_outputs is planning.check_directory_outputs
    original = planning.REPLACED["check_directory_outputs"]
    cases = {
        "siblings": [_Job("a", "r/x/1.txt", "r/x/2.txt"), _Job("b", "r/y/1.txt")],
        "nested, two jobs": [_Job("a", "r/x"), _Job("b", "r/x/1.txt")],
        "nested, one job": [_Job("a", "r/x", "r/x/1.txt")],
        "prefix only": [_Job("a", "r/x"), _Job("b", "r/x1/1.txt"), _Job("c", "r/x.txt")],
        "absolute and relative": [_Job("a", str(tmp_path / "r" / "x")), _Job("b", "./r//x/./deep/1.txt")],
        "the same file twice": [_Job("a", "r/x.txt"), _Job("b", "r/x.txt")],
        "nested, not the first": [_Job("a", "r/x"), _Job("a2", "r/x/a.txt"), _Job("b", "r/x/b/c.txt")],
    }
    outcomes = {}
    for name, jobs in cases.items():
        dag = types.SimpleNamespace(jobs=jobs)
        answers = []
        for check in (original, planning.check_directory_outputs):
            try:
                check(dag)
                answers.append("ok")
            except ChildIOException as e:
                answers.append(str(e))
        assert answers[0] == answers[1], (name, answers)
        outcomes[name] = answers[0] == "ok"
    assert outcomes == {
        "siblings": True,
        "nested, two jobs": False,
        "nested, one job": True,
        "prefix only": True,
        "absolute and relative": False,
        "the same file twice": True,
        "nested, not the first": False,
    }
