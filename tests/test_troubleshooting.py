"""The troubleshooting page's claims about commands hold: each message it quotes is what the
code (or Snakemake's own command line, the installed version) prints, and each fix it gives
works."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import yaml

from sparta.cli import main
from sparta.data import PromptFileError, read_prompt_file

from .workflow_helpers import REPO

PAGE = (REPO / "docs/guides/troubleshooting.md").read_text()


def _quoted(fragment: str) -> str:
    """``fragment`` as the page quotes it (a failure names the page)."""
    assert fragment in PAGE, f"docs/guides/troubleshooting.md no longer says {fragment!r}"
    return fragment


def _snakemake(tmp_path, *args) -> str:
    """What Snakemake's command line prints for ``args`` (it stops before reading any workflow)."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def test_snakemake_takes_no_dotted_config_key_but_a_mapping_or_a_config_file(tmp_path):
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    from sparta.config import ConfigError, validate
    from sparta.settings import Settings

    said = _snakemake(tmp_path, "-n", "--config", "a.b=1")
    assert "Traceback" in said and "parse_config" in said
    assert (
        _quoted("ValueError: Invalid config definition: Config entry must start with a valid identifier.")
        in said
    )

    def merged(*entries, files=()):
        """config.yaml, then each file, then --config, as Snakemake merges them."""
        config = yaml.safe_load((REPO / "config.yaml").read_text())
        for f in files:
            update_config(config, yaml.safe_load(f.read_text()))
        update_config(config, parse_config(list(entries)))
        return config

    _quoted("`--config 'prompts={per_iteration: 4}'`")
    config = merged("prompts={per_iteration: 4}")
    assert config["prompts"]["per_iteration"] == "4"  # text: Snakemake's YAML reads no types
    assert config["prompts"]["file"] == yaml.safe_load((REPO / "config.yaml").read_text())["prompts"]["file"]
    validate(config)
    assert Settings.from_config(config).prompts.per_iteration == 4  # the other keys stay

    _quoted("after `--config 'evaluation={enabled: false}'`")
    with pytest.raises(ConfigError) as e:
        validate(merged("evaluation={enabled: false}"))
    assert _quoted("evaluation.enabled: 'false' is not of type 'boolean'") in str(e.value)
    (tmp_path / "eval.yaml").write_text("evaluation:\n  enabled: false\n")
    config = merged(files=[tmp_path / "eval.yaml"])
    validate(config)
    assert Settings.from_config(config).evaluation.enabled is False


def test_a_target_after_configfile_is_read_as_a_config_file(tmp_path):
    from snakemake.cli import get_argument_parser

    _quoted("`snakemake --configfile my.yaml results/default/report.html`")
    (tmp_path / "my.yaml").write_text("iterations: 1\n")
    said = _snakemake(tmp_path, "-n", "--configfile", "my.yaml", "results/default/report.html")
    assert "Traceback" in said and "FileNotFoundError" in said
    assert _quoted("'results/default/report.html'") in said

    parser = get_argument_parser()
    target = "results/default/report.html"
    read = parser.parse_args(["--configfile", "my.yaml", target])
    assert [str(f) for f in read.configfile] == ["my.yaml", target] and not read.targets
    read = parser.parse_args(["--config", "iterations=1", target])
    assert read.config == ["iterations=1", target] and not read.targets
    _quoted("(`snakemake results/default/report.html --configfile my.yaml`)")
    _quoted("`--configfile=my.yaml`")
    for argv in ([target, "--configfile", "my.yaml"], ["--configfile=my.yaml", target]):
        read = parser.parse_args(argv)
        assert [str(f) for f in read.configfile] == ["my.yaml"] and list(read.targets) == [target]


def test_sparta_usage_errors_show_the_form_expected(capsys):
    with pytest.raises(SystemExit) as e:
        main(["pairs", "results/default", "--iteration", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert _quoted("sparta pairs: error: unrecognized arguments: --iteration 1") in err
    assert "sparta pairs results/default/iter_1" in err and _quoted("`sparta pairs results/default/iter_1`")
    assert "usage: sparta pairs" in err and "iteration_dir" in err
    for argv, expected in (
        (["pairs"], "sparta pairs results/<experiment>/iter_<t>"),
        (["standings"], "sparta standings results/<experiment>"),
        (["export", "results/default"], "sparta export results/<experiment> OUT --member NAME"),
        (["standings", "results/default", "extra"], "sparta standings results/<experiment>"),
        (["nothing"], "sparta {pairs,standings,show,config,export,compare}"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert expected in err and "expected" in err, (argv, err)


def test_the_prompt_file_rows_quote_the_messages(tmp_path):
    def error(path) -> str:
        with pytest.raises(PromptFileError) as e:
            read_prompt_file(path, "prompt")
        return str(e.value)

    (tmp_path / "p.json").write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    said = error(tmp_path / "p.json")
    assert (
        "looks like JSON Lines (one JSON object per line), not one JSON document: rename it p.jsonl" in said
    )
    _quoted("looks like JSON Lines (one JSON object per line), not one JSON document: rename it ....jsonl")
    (tmp_path / "p.csv").write_text("prompt\nhello\nNA\n")
    assert _quoted("'NA', read as missing") in error(tmp_path / "p.csv")
    (tmp_path / "folder").mkdir()
    assert _quoted("is a folder (config key prompts.file)") in error(tmp_path / "folder")
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"prompt": "hello"}) + "\n" + json.dumps({"prompt": "NA"}) + "\n"
    )
    assert read_prompt_file(tmp_path / "p.jsonl", "prompt")["prompt"].tolist() == ["hello", "NA"]


def test_the_export_rows_quote_the_messages(tmp_path, capsys):
    """A run folder copied without its base, then without an adapter (no model is loaded)."""
    from sparta.members import MemberSpec

    member = tmp_path / "copy/exp/iter_1/members/bob"
    (tmp_path / "copy/exp/iter_0").mkdir(parents=True)
    (member / "adapter").mkdir(parents=True)
    (member / "adapter/adapter_config.json").write_text("{}")
    MemberSpec("bob", str(tmp_path / "results/_bases/tiny"), str(member / "adapter")).write(
        member / "member.json"
    )
    run = str(tmp_path / "copy/exp")
    assert main(["export", run, str(tmp_path / "out"), "--member", "bob"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("sparta export: the base of bob, ") and _quoted(
        "sparta export: the base of NAME, "
    )
    assert _quoted("is not there, nor in a _bases/ or results/_bases/ folder in or above") in said
    (member / "adapter/adapter_config.json").unlink()
    (member / "adapter").rmdir()
    assert main(["export", run, str(tmp_path / "out"), "--member", "bob"]) == 2
    said = capsys.readouterr().err
    assert (
        f"sparta export: the adapter of bob at iteration 1, {(member / 'adapter').resolve()}, is gone" in said
    )
    _quoted("`sparta export: the adapter of NAME at iteration t, PATH, is gone`")
    _quoted("`--base ORG/NAME`")


def test_chmod_opens_a_base_written_0600_as_umask_022_would(tmp_path):
    base = tmp_path / "results/_bases/tiny"
    (base / "sub").mkdir(parents=True)
    (base / "model.safetensors").write_bytes(b"w")
    (base / "model.safetensors").chmod(0o600)
    (base / "sub").chmod(0o700)
    _quoted("`chmod -R go+rX results/_bases`")
    subprocess.run(["chmod", "-R", "go+rX", "results/_bases"], cwd=tmp_path, check=True)
    assert stat.S_IMODE((base / "model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((base / "sub").stat().st_mode) == 0o755
