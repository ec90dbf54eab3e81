"""The shipped software environments as pip sees them: every ``envs/*.yaml`` (its Python and
its pip section) and every requirements file, resolved together against the package registry
with ``pip install --dry-run`` (nothing is installed: pip reads each candidate's metadata).

``python -m tests.envs`` resolves them all and prints one line each (``make envs``); the
tests in ``tests/test_envs.py`` call the same functions.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))
REQUIREMENT_FILES = [
    p
    for p in (REPO / "requirements.txt", REPO / "docs" / "requirements.txt", REPO / "envs" / "vllm-gpu.txt")
    if p.is_file()
]


@dataclass(frozen=True)
class Environment:
    name: str  # the file, relative to the repository
    python: str | None  # "3.11" (an env file's python=...), None: the running interpreter's
    pip: str | None  # the pip version the env pins
    requirements: tuple[str, ...]


def read_env_file(path: Path, name: str | None = None) -> Environment:
    env = yaml.safe_load(Path(path).read_text())
    python = pip = None
    requirements: list[str] = []
    for dep in env.get("dependencies", []):
        if isinstance(dep, dict):
            requirements += [str(r) for r in dep.get("pip", [])]
        elif m := re.fullmatch(r"python[=]+([\d.]+)", str(dep)):
            python = m.group(1)
        elif m := re.fullmatch(r"pip[=]+([\d.]+)", str(dep)):
            pip = m.group(1)
    return Environment(name or Path(path).name, python, pip, tuple(requirements))


def read_requirements(path: Path) -> Environment:
    lines = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line == "-e .":  # the project itself, from the repository root
            line = f"-e {REPO}"
        if line:
            lines.append(line)
    return Environment(str(Path(path).relative_to(REPO)), None, None, tuple(lines))


def shipped() -> list[Environment]:
    return [read_env_file(p, f"envs/{p.name}") for p in ENV_FILES] + [
        read_requirements(p) for p in REQUIREMENT_FILES
    ]


LOCATION_DEPENDENT = re.compile(r"^(-e|--editable|-r|-c|--requirement|--constraint)\b|^\.|^/|^~|file:|\.\./")


def location_problems(env: Environment) -> list[str]:
    """Requirements whose meaning depends on where the file lies: Snakemake copies an env file
    to ``.snakemake/conda/<hash>.yaml`` and conda runs its pip section from there, so a path
    (``-e ../``, ``./pkg``, ``-r other.txt``) points somewhere else."""
    return [
        f"{env.name}: {r!r} depends on the file's location"
        for r in env.requirements
        if LOCATION_DEPENDENT.search(r)
    ]


def resolver(folder: Path, pip_version: str = "25.3") -> Path:
    """A scratch virtual environment whose pip (at ``pip_version``) does the resolving."""
    python = folder / "bin" / "python"
    if not python.exists():
        venv.create(folder, with_pip=True, clear=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"pip=={pip_version}"],
            check=True,
            capture_output=True,
            env=_pip_env(),
        )
    return python


def _pip_env() -> dict:
    # this machine's pip configuration (constraints, extra indexes) is not the cluster's
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@dataclass(frozen=True)
class Resolution:
    env: Environment
    ok: bool
    skipped: str | None  # why it was not tried (another Python)
    output: str  # pip's complaint, or the number of packages it would install

    def line(self) -> str:
        if self.skipped:
            return f"{self.env.name}: skipped ({self.skipped})"
        return f"{self.env.name}: {'resolves' if self.ok else 'DOES NOT RESOLVE'}: {self.output}"


def resolve(env: Environment, python: Path, timeout: int = 900) -> Resolution:
    """``pip install --dry-run`` of the env's requirements, from a scratch folder (so a
    requirement that needs the file's location fails here too), with the machine's pip
    configuration off."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if env.python and env.python != here:
        return Resolution(env, False, f"needs Python {env.python}, this is {here}", "")
    with tempfile.TemporaryDirectory() as scratch:
        reqs = Path(scratch) / "requirements.txt"
        reqs.write_text("\n".join(env.requirements) + "\n")
        report = Path(scratch) / "report.json"
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
            + ["--report", str(report), "-r", str(reqs)],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_pip_env(),
        )
        if proc.returncode != 0:
            errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            return Resolution(env, False, None, "\n".join(errors[-25:]))
        import json

        installs = json.loads(report.read_text())["install"]
        return Resolution(env, True, None, f"{len(installs)} packages")


def resolve_all(envs: list[Environment], folder: Path, workers: int = 4) -> list[Resolution]:
    python = resolver(folder)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda e: resolve(e, python), envs))


def registry_reachable() -> bool:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "pip", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_pip_env(),
    )
    return proc.returncode == 0


def main() -> int:
    envs = shipped()
    problems = [p for e in envs for p in location_problems(e)]
    with tempfile.TemporaryDirectory() as folder:
        results = resolve_all(envs, Path(folder) / "resolver")
    for r in results:
        print(r.line())
    for p in problems:
        print(p)
    return 0 if all(r.ok or r.skipped for r in results) and not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
