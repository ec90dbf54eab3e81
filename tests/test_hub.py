"""Models and adapters by hub id (hf://org/name[@revision]), offline: a Hugging Face cache
built by hand in the hub cache layout, HF_HUB_OFFLINE=1, never the network."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from sparta import hub
from sparta.config import ConfigError, load
from sparta.members import MemberSpec, hub_name, is_hub_id

from .tiny import build_tiny_model
from .workflow_helpers import run_snakemake, tiny_config, write_config

MODEL, ADAPTER = "sparta-test/tiny", "sparta-test/tiny-lora"
COMMITS = {MODEL: "1" * 40, ADAPTER: "2" * 40}


def snapshot(cache, repo: str) -> tuple:
    """models--org--name/{refs/main, blobs, snapshots/<commit>} of ``repo``."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "blobs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(COMMITS[repo])
    return folder / "snapshots" / COMMITS[repo]


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
    return home


@pytest.fixture
def offline(hf_home, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
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


def test_a_run_with_members_by_hub_id(offline, tmp_path):
    """Members by hub id run offline: the manifest first, member.json keeps the ids, every
    model job resolves them to the cached snapshots; export names the hub id as the base."""
    cfg = tiny_config(
        tmp_path,
        "hub",
        iterations=1,
        base_models={"tiny": {"path": f"hf://{MODEL}"}},
        members=[
            {"name": "ann", "base": "tiny", "adapter": f"hf://{ADAPTER}@{COMMITS[ADAPTER]}"},
            {"name": "bob", "base": f"hf://{MODEL}"},
            {"name": "cid", "base": "tiny"},
        ],
        prompts={"per_iteration": 4},
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    work = tmp_path / "work"
    run_snakemake(work, write_config(tmp_path, cfg))
    manifest = pd.read_parquet(work / "results" / "_hub" / "manifest.parquet")
    assert sorted(manifest["id"]) == sorted([f"hf://{MODEL}", f"hf://{ADAPTER}@{COMMITS[ADAPTER]}"])
    assert set(manifest["commit"]) == set(COMMITS.values())
    run = work / "results" / "hub"
    first = json.loads((run / "iter_0/members/ann/member.json").read_text())
    assert first == {"name": "ann", "base": f"hf://{MODEL}", "adapter": f"hf://{ADAPTER}@{COMMITS[ADAPTER]}"}
    after = MemberSpec.read(run / "iter_1/members/ann/member.json")
    assert after.base == f"hf://{MODEL}" and (run / "iter_1/members/ann/adapter").is_dir()
    assert (run / "final_state.parquet").is_file()

    from sparta.export import export

    record = export(run, tmp_path / "exported", member="ann", iteration=1)
    assert record["base_model_name_or_path"] == MODEL
    written = yaml.safe_load((tmp_path / "exported" / "sparta_export.yaml").read_text())
    assert written["base_id"] == MODEL and written["base_provenance"]["id"] == MODEL
    assert f"the hub model `{MODEL}`" in (tmp_path / "exported" / "README.md").read_text()
    config = json.loads((tmp_path / "exported" / "adapter_config.json").read_text())
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
