"""Cluster-facing configuration: the Slurm profile, per-rule resources, the pinned conda
environments (checked against the package registry) and the paper-scale DAG."""

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from .workflow_helpers import REPO, fake_model_folder, paper_workspace

RULE_FILES = sorted((REPO / "rules").glob("*.smk"))
MODEL_RULES = {"sft_member", "combat", "judge", "dpo", "evaluate_member"}
LOCAL_RULES = {
    "init_member",
    "init_state",
    "split_prompts",
    "matchmake",
    "aggregate",
    "finalize",
    "evaluation_table",
    "plots",
}


def _rules() -> dict[str, str]:
    """Rule name -> its body, from every rules/*.smk: ``rule <name>:``, and a rule defined in a
    loop (one per pool: ``for ... in model_rules("<name>")``, or ``name:`` then a literal)."""
    out = {}
    for path in RULE_FILES:
        # top-level statements: a rule, or a loop whose body defines rules
        for chunk in re.split(r"^(?=rule \w+:|for |if |def |\S+ = )", path.read_text(), flags=re.M):
            named = re.match(r"rule (\w+):\n", chunk)
            if named:
                out[named.group(1)] = chunk[named.end() :]
            elif re.search(r"^\s+rule:\n", chunk, flags=re.M):
                stage = re.search(r'model_rules\("(\w+)"', chunk) or re.search(r'name:\s+\(?"(\w+)"', chunk)
                out[stage.group(1)] = chunk
    return out


def test_profile_sets_what_a_cluster_run_needs():
    profile = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["jobs"] >= 10 and profile["retries"] >= 1
    assert profile["rerun-incomplete"] is True and profile["latency-wait"] >= 30
    text = (REPO / "slurm" / "config.yaml").read_text()
    assert "SPARTA_SLURM_ACCOUNT" in text and "SPARTA_SLURM_PARTITION" in text


ENVLESS_RULES: set[str] = set()  # every rule names its env (snakemake --lint)


def test_every_rule_declares_its_env_and_where_it_runs():
    rules = _rules()
    assert MODEL_RULES | LOCAL_RULES <= set(rules)
    for name, body in rules.items():
        # the local rules that read models, tokenizers or the hub run in snakemake's own
        # environment (requirements.txt): the login node never builds the GPU env for them
        if name in ENVLESS_RULES:
            assert "conda:" not in body and "localrule: True" in body, name
            continue
        assert "conda:" in body, f"rule {name} names no conda env"
        assert "slurm_extra" not in body, f"rule {name}: GPUs go through the gpu resource"
    for name in MODEL_RULES:  # stage_resources, itself or through model_rules
        declared = re.search(r"stage_resources\(|_rule\.resources", rules[name])
        assert declared, f"model rule {name} must declare gpu/mem/runtime"
        assert "localrule: True" not in rules[name]
    for name in LOCAL_RULES:
        assert "localrule: True" in rules[name], f"small rule {name} should run locally"


def test_stage_resources_come_from_the_config(tmp_path):
    """What snakemake hands the executor for a dpo job: gpu, cpus_per_gpu, mem_mb, runtime
    from config resources.dpo (the real-Slurm test shows a retry asking for more time)."""
    from .workflow_helpers import tiny_config, write_config

    fake_model_folder(tmp_path / "base")
    cfg = tiny_config(tmp_path / "base", evaluation={"enabled": False}, analysis={"enabled": False})
    cfg["resources"] = {"dpo": {"gpu": 2, "cpus_per_gpu": 6, "mem_mb": 1000, "runtime": 30}}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path / "work"),
            "--configfile",
            str(write_config(tmp_path, cfg)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPARTA_SLURM_ACCOUNT": "acct1", "SPARTA_SLURM_PARTITION": "gpu"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = re.split(r"\n(?=rule \w+:)", proc.stdout)
    dpo = [b for b in blocks if b.startswith("rule dpo:")]
    assert dpo
    for block in dpo:
        res = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", block).group(1).split(", "))
        assert (res["gpu"], res["cpus_per_gpu"], res["mem_mb"], res["runtime"]) == ("2", "6", "1000", "30")
        assert (res["slurm_account"], res["slurm_partition"]) == ("acct1", "gpu")


# --- environments --------------------------------------------------------------------------


def _env_packages(path: Path):
    env = yaml.safe_load(path.read_text())
    conda, pip = [], []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip.extend(dep["pip"])
        else:
            conda.append(dep)
    return conda, pip


ENVS = sorted((REPO / "envs").glob("*.yaml"))


def test_every_env_is_pinned_and_every_rule_env_exists():
    assert {p.name for p in ENVS} >= {"core.yaml", "train.yaml", "vllm.yaml"}
    for path in ENVS:
        conda, pip = _env_packages(path)
        for dep in conda:
            assert re.fullmatch(r"[\w.-]+=[\w.]+", dep), f"{path.name}: conda package {dep} is not pinned"
        for dep in pip:
            assert re.fullmatch(r"[\w.-]+==[\w.]+", dep), f"{path.name}: pip package {dep} is not pinned"
    named = set()
    for rule_file in RULE_FILES:
        named |= set(re.findall(r'"\.\./envs/(\w+\.yaml)"', rule_file.read_text()))
    named |= set(re.findall(r'"\.\./envs/(\w+\.yaml)"', (REPO / "rules" / "common.smk").read_text()))
    assert named == {p.name for p in ENVS}


def _available_versions(name: str) -> set[str] | None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name, "--pre", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r"Available versions: (.*)", proc.stdout)
    if proc.returncode != 0 or not m:
        return None
    return {v.strip().split("+")[0] for v in m.group(1).split(",")}


@pytest.mark.slow
def test_pinned_packages_exist_in_the_registry():
    """Every pip package of every env (and requirements.txt) at its pinned version, as PyPI
    lists it for this Python. The conda-forge pins (python, pip) cannot be checked here:
    conda's registry is not reachable from these machines."""
    pins: dict[str, set[str]] = {}
    for path in ENVS:
        for dep in _env_packages(path)[1]:
            if "==" in dep:
                name, version = dep.split("==")
                pins.setdefault(name.lower(), set()).add(version)
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins.setdefault(name.lower(), set()).add(version.strip())
    missing, unreachable = [], []
    # one `pip index` process per package, 8 at a time: each mostly waits on the registry
    with ThreadPoolExecutor(8) as pool:
        listed = dict(zip(pins, pool.map(_available_versions, pins)))
    for name, versions in sorted(pins.items()):
        if (available := listed[name]) is None:
            unreachable.append(name)
            continue
        missing += [f"{name}=={v}" for v in versions if v not in available]
    if len(unreachable) == len(pins):
        pytest.skip("the package registry is not reachable (pip index versions failed for every package)")
    assert not unreachable, f"pip index could not list {unreachable}"
    assert not missing, f"pinned versions not in the registry: {missing}"


# --- paper-scale DAG -----------------------------------------------------------------------

PAPER = REPO / "workflow" / "configs" / "paper.yaml"


@pytest.fixture(scope="module")
def paper_workdir(tmp_path_factory):
    return paper_workspace(tmp_path_factory.mktemp("paper"), PAPER)


def _dry_run(work: Path, *extra: str) -> tuple[dict[str, int], float]:
    start = time.perf_counter()
    proc = subprocess.run(
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
            str(work),
            "--configfile",
            str(PAPER),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts, seconds


@pytest.mark.slow
def test_paper_scale_dag_job_counts(paper_workdir):
    """10 members, 8 iterations, 1 round each, 9 checkpoints evaluated; fanout pool as shipped."""
    counts, seconds = _dry_run(paper_workdir)
    common = {
        "hub_download": 1,  # the base, the 10 experts and GSM8K, by hub id
        "hub_dataset": 2,  # GSM8K's train (X) and test (validation and test) splits
        "init_hub_member": 10,
        "init_state": 1,
        "split_prompts": 1,
        "matchmake": 8,
        "aggregate": 8,  # the last (here the only) round also writes the iteration's pairs
        "dpo": 80,
        "finalize": 1,
        "evaluation_table": 1,
        "analyze": 1,
        "plots": 1,
        "record_settings": 1,
        "pair_accuracy": 7,
        "all": 1,
    }
    assert counts == {**common, "combat": 8, "judge": 8, "evaluate_member": 9, "total": 149}
    print(f"paper-scale dry run (fanout pool): {seconds:.1f} s")
    counts, seconds = _dry_run(paper_workdir, "--config", "fanout=member")
    assert counts == {**common, "combat": 80, "judge": 80, "evaluate_member": 90, "total": 374}
    print(f"paper-scale dry run (fanout member): {seconds:.1f} s")
    counts, _ = _dry_run(paper_workdir, "--config", "dpo_fanout=pool")
    assert counts == {**common, "dpo": 8, "combat": 8, "judge": 8, "evaluate_member": 9, "total": 77}


@pytest.mark.slow
def test_paper_study_dag(paper_workdir):
    """Sparta, 4 baselines, 4 ablations and 3 pool sizes, 3 seeds: 36 runs sharing 3 initial
    pools; the 10 given experts are set up once per seed (no SFT)."""
    study = REPO / "workflow" / "configs" / "paper-study.yaml"
    counts, seconds = _dry_run(paper_workdir, "--configfile", str(PAPER), str(study))
    runs = 12 * 3
    assert counts["init_hub_member"] == 10 * 3 and counts["split_prompts"] == 3
    assert counts["evaluation_table"] == runs and counts["compare"] == 1 and counts["finalize"] == runs
    # fanout pool (paper.yaml): one job per round and per evaluated checkpoint serves the full
    # pool; each pool size has its rules (<stage>_pool2 ...), one job per round and checkpoint
    # too; checkpoint 0 is shared; DPO one job per run and iteration (paper-study.yaml)
    assert counts["evaluate_member"] == 3 + 3 * 9 * 8 and counts["combat"] == counts["judge"] == 3 * 9 * 8
    assert counts["dpo"] == 3 * 9 * 8
    for stage in ("combat", "judge", "dpo", "evaluate_member"):
        assert [counts[f"{stage}_pool{i}"] for i in (2, 3, 4)] == [3 * 8] * 3
    assert not any("per_member" in rule for rule in counts)
    assert counts["aggregate"] == counts["matchmake"] == 36 * 8
    print(f"paper-scale study dry run: {seconds:.1f} s, {counts['total']} jobs")


def test_the_paper_s_table_1_tasks_expand_with_no_edit():
    """paper.yaml, paper-study.yaml and the task registry: 12 tasks x 5 methods (Table 1) and
    the 7 ablations and pool sizes on the paper's four tasks of Table 3 and Figure 3, x 3 seeds,
    one initial pool per seed shared by every task, each task's X and evaluation from its
    source (a hub dataset, or the file the registry names), and every hub id the study loads."""
    from sparta.config import validate
    from sparta.hub import run_ids
    from sparta.methods import problems as method_problems
    from sparta.study import expand, merge, run_configs

    configs = REPO / "workflow" / "configs"
    merged = yaml.safe_load((REPO / "config.yaml").read_text())
    for name in ("paper.yaml", "paper-study.yaml", "paper-tasks.yaml", "paper-tasks-files.yaml"):
        merged = merge(merged, yaml.safe_load((configs / name).read_text()))
    study = expand(validate(merged))
    for run in run_configs(merged):  # each run's config as the workflow checks it (a task's
        validate(run.config)  # overlay may unset what paper.yaml sets: config: null)
    # what each method needs of its task (SPIN: a reference answer per prompt), for every run
    assert {e: p for e, s in study.experiments.items() if (p := method_problems(s, REPO, []))} == {}
    assert len(study.experiments) == (12 * 5 + 4 * 7) * 3 and len(set(study.pools.values())) == 3
    runs = study.experiments
    four = {"alpaca", "com2", "medqa", "gsm8k"}
    assert {study.tasks[e] for e in runs if study.labels[e] == "no_top_k_match"} == four
    assert {study.tasks[e] for e in runs if study.labels[e] == "pool_3"} == four
    assert len({study.tasks[e] for e in runs if study.labels[e] == "sppo"}) == 12
    # the hub tasks alone (no file to supply): the ablations on MedQA and GSM8K
    hub = merge(yaml.safe_load((REPO / "config.yaml").read_text()), {})
    for name in ("paper.yaml", "paper-study.yaml", "paper-tasks.yaml"):
        hub = merge(hub, yaml.safe_load((configs / name).read_text()))
    hub_runs = expand(validate(hub))
    assert len(hub_runs.experiments) == (8 * 5 + 2 * 7) * 3
    assert {hub_runs.tasks[e] for e in hub_runs.experiments if hub_runs.labels[e] == "pool_7"} == {
        "medqa",
        "gsm8k",
    }
    gsm8k, hard = runs["paper/gsm8k/sparta-seed1"], runs["paper/math_hard/spin-seed2"]
    assert (gsm8k.prompts.dataset, gsm8k.prompts.split, gsm8k.prompts.validation) == (
        "openai/gsm8k",
        "train",
        0,
    )
    assert gsm8k.evaluation.tasks[0].split == "test" and not gsm8k.evaluation.tasks[0].chat_template
    assert (
        hard.prompts.where == {"level": ["Level 4", "Level 5"]} and hard.evaluation.tasks[0].answer == "boxed"
    )
    medqa = runs["paper/medqa/spin-seed1"].prompts
    assert "{options[D]}" in medqa.prompt_template and medqa.reference_column == "answer_idx"
    tqa = runs["paper/truthfulqa/sparta-seed3"].evaluation.tasks[0]
    assert (tqa.options_column, tqa.metric, tqa.max_examples) == ("mc1_targets.choices", "truthfulqa_mc", 400)
    assert runs["paper/alpaca/sparta-seed1"].evaluation.judge.base == "hf://Qwen/Qwen2.5-7B-Instruct"
    rot = runs["paper/normad_rot/sparta-seed1"].prompts
    assert "{Rule-of-Thumb}" in rot.prompt_template and rot.answer_map == {
        "yes": "A",
        "no": "B",
        "neutral": "C",
    }
    assert (rot.dataset, rot.validation, rot.test) == ("akhilayerukola/NormAd", 0.05, 0.05)
    ids = set().union(*(run_ids(s) for s in runs.values()))
    assert "hf://Qwen/Qwen2.5-7B-Instruct" in ids and "hf://bunsenfeng/yuru_qw_flan_v2" in ids
    assert {"hf://datasets/openai/gsm8k", "hf://datasets/GBaker/MedQA-USMLE-4-options"} <= ids
    text = "".join((configs / n).read_text() for n in ("paper.yaml", "paper-study.yaml", "paper-tasks.yaml"))
    assert "EDIT" not in text  # only the tasks whose data is not on the hub name a file to supply


def test_every_script_that_can_start_vllm_runs_only_under_a_main_guard():
    """vLLM spawns its engine processes, and a spawned child imports the job script again:
    a script that serves members does its work only under ``if __name__ == "__main__":``
    (a body at module level would run again in the child and the job die), then ends through
    sparta.jobs.finish."""
    import ast

    scripts = REPO / "workflow" / "scripts"
    serving = [
        p for p in sorted(scripts.glob("*.py")) if re.search(r"served_members|open_backend", p.read_text())
    ]
    assert {p.stem for p in serving} >= {"combat", "judge", "evaluate_member", "pair_accuracy"}
    for path in serving:
        tree = ast.parse(path.read_text())
        body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
        body = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert len(body) == 1 and isinstance(body[0], ast.If), f"{path.name}: work outside the __main__ guard"
        guard = ast.unparse(body[0])
        assert guard.startswith("if __name__ == '__main__':") and "finish()" in guard, path.name
