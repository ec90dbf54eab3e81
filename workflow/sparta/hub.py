"""Models, adapters and datasets by Hugging Face hub id: ``hf://<org>/<name>[@<revision>]``.

Wherever a model or adapter folder is accepted (``base_models.*.path``, ``members[].base``,
``members[].adapter``, ``baselines.annotator``, ``evaluation.judge``) a hub id may stand
instead; a prompt set or task may name a hub ``dataset``. Rule ``hub_download`` (a local rule:
it runs where snakemake runs, the login node with the network on a cluster) downloads every id
of a run once into the Hugging Face cache and writes the manifest; jobs read the cache alone,
at the commit the manifest recorded (:func:`local`, :func:`load_split`; the workflow sets
``HF_HUB_OFFLINE=1`` for its jobs): a job never touches the network.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd

from . import tables
from .layout import hub_manifest
from .modelfiles import backend_adapter_problems

PREFIX = "hf://"
DATASETS = "hf://datasets/"
_NAME = r"([A-Za-z0-9][A-Za-z0-9_.-]*)/([A-Za-z0-9][A-Za-z0-9_.-]*)(?:@([A-Za-z0-9_./-]+))?"
_REF = re.compile(r"hf://(datasets/)?" + _NAME)
_DATASET = re.compile(r"(?:hf://datasets/)?" + _NAME)
_TRUE = {"1", "true", "yes", "on"}

USER_OFFLINE = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE
"""Whether the user asked for offline mode (read when sparta.hub is first imported, before the
workflow sets ``HF_HUB_OFFLINE=1`` for its own jobs; sparta itself never sets it at import)."""


PLANNING = False
"""Set by the workflow for a dry run: an id not in the cache is then part of the plan (rule
hub_download), never a config problem."""


class HubError(RuntimeError):
    pass


@dataclass(frozen=True)
class HubRef:
    """A parsed hub id: ``repo`` (org/name) at ``revision`` (None: the default branch), of
    ``repo_type`` model (models and adapters) or dataset."""

    id: str
    repo: str
    revision: str | None
    repo_type: str = "model"

    @property
    def requested(self) -> str:
        return self.revision or "main"

    def fetch_command(self) -> str:
        """The one command that puts this id into the Hugging Face cache."""
        rev = f" --revision {self.revision}" if self.revision else ""
        kind = " --repo-type dataset" if self.repo_type == "dataset" else ""
        return f"hf download {self.repo}{kind}{rev}"


def jobs_offline() -> None:
    """Every job snakemake starts from here (locally, or on Slurm) runs with ``HF_HUB_OFFLINE=1``;
    the local rule hub_download lifts it for its own download."""
    os.environ["HF_HUB_OFFLINE"] = "1"


def is_ref(value) -> bool:
    """Whether ``value`` is written as a hub id (``hf://...``)."""
    return isinstance(value, str) and value.startswith(PREFIX)


def parse(value: str) -> HubRef:
    m = _REF.fullmatch(value)
    if m is None:
        raise HubError(f"{value!r} is not a hub id: write hf://<org>/<name>[@<revision>]")
    return HubRef(value, f"{m.group(2)}/{m.group(3)}", m.group(4), "dataset" if m.group(1) else "model")


def dataset_id(value: str) -> str:
    """A dataset as written in a config (``<org>/<name>[@<revision>]``, or already
    ``hf://datasets/...``) as its hub id ``hf://datasets/<org>/<name>[@<revision>]``."""
    m = _DATASET.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise HubError(f"{value!r} is not a hub dataset: write <org>/<name>[@<revision>]")
    rev = f"@{m.group(3)}" if m.group(3) else ""
    return f"{DATASETS}{m.group(1)}/{m.group(2)}{rev}"


def dataset_key(dataset: str, config: str | None, split: str) -> str:
    """The file stem of one (dataset, config, split) under ``results/_data/``: readable,
    one per distinct source (``org--name[@rev]--config--split``)."""
    ref = parse(dataset_id(dataset))
    rev = f"@{ref.revision}" if ref.revision else ""
    parts = [ref.repo.replace("/", "--") + rev, config or "default", split]
    return "--".join(re.sub(r"[^A-Za-z0-9_.@-]", "_", p) for p in parts)


def cache_dir() -> Path:
    """The Hugging Face hub cache of this process's environment (HF_HUB_CACHE, HF_HOME)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home) / "hub"


def cached(ref: HubRef | str, revision: str | None = None) -> Path | None:
    """The snapshot folder of ``ref`` (at ``revision``, default its own) in the cache, or None
    when it is not there. Never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    ref = parse(ref) if isinstance(ref, str) else ref
    try:
        folder = snapshot_download(
            ref.repo,
            repo_type=ref.repo_type,
            revision=revision or ref.revision,
            cache_dir=cache_dir(),
            local_files_only=True,
        )
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError, OSError):
        return None
    return Path(folder) if Path(folder).is_dir() else None


def kind(folder: Path, repo_type: str = "model") -> str | None:
    """``dataset`` (a dataset repo), ``adapter`` (adapter_config.json), ``model`` (config.json) or None."""
    if repo_type == "dataset":
        return "dataset"
    if (folder / "adapter_config.json").is_file():
        return "adapter"
    if (folder / "config.json").is_file():
        return "model"
    return None


def missing_message(ref: HubRef, where: str) -> str:
    offline = (
        "HF_HUB_OFFLINE is set in your environment (unset it where the hub can be reached)"
        if USER_OFFLINE
        else f"the hub ({endpoint()}) cannot be reached"
    )
    return (
        f"{where}: {ref.id} is not in the Hugging Face cache ({cache_dir()}) and {offline}: "
        f"download it first where there is network, with the same HF_HOME: {ref.fetch_command()}"
    )


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


@functools.cache
def reachable(timeout: float = 3.0) -> bool:
    """Whether the hub answers here (HF_HUB_OFFLINE=1 given by the user: no)."""
    if USER_OFFLINE:
        return False
    url = urlparse(endpoint())
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


# --- the manifest and the download (rule hub_download) ---------------------------------------


def download(ids: list[str]) -> list[dict]:
    """Each id into the cache (once: files already there are not fetched again); the
    manifest rows."""
    from huggingface_hub import snapshot_download

    rows = []
    for value in dict.fromkeys(ids):
        ref = parse(value)
        folder = cached(ref) if USER_OFFLINE else None
        if folder is None:
            try:
                folder = Path(
                    snapshot_download(
                        ref.repo, repo_type=ref.repo_type, revision=ref.revision, cache_dir=cache_dir()
                    )
                )
            except Exception as e:  # no network, no such repo, ...
                raise HubError(f"{missing_message(ref, 'download')} ({type(e).__name__}: {e})") from None
        rows.append(manifest_row(ref, folder))
    return rows


def manifest_row(ref: HubRef, folder: Path) -> dict:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {
        "id": ref.id,
        "repo": ref.repo,
        "requested_revision": ref.requested,
        "commit": folder.name,
        "kind": kind(folder, ref.repo_type),
        "files": len(files),
        "size": sum(p.stat().st_size for p in files),
    }


def write_manifest(rows: list[dict], path: str | os.PathLike) -> None:
    tables.write(pd.DataFrame(rows, columns=tables.columns("manifest")), path, "manifest")


@functools.cache
def _manifest(path: str, stamp: float) -> dict[str, dict]:
    return {row["id"]: row for row in tables.read(path, "manifest").to_dict("records")}


def read_manifest(path: str | os.PathLike | None = None) -> dict[str, dict]:
    """id -> manifest row (empty when there is no manifest)."""
    path = Path(path or hub_manifest())
    if not path.is_file():
        return {}
    return _manifest(str(path.resolve()), path.stat().st_mtime)


def find_manifest(start: str | os.PathLike) -> Path | None:
    """The manifest of the results root above ``start`` (a run folder), if any."""
    name = Path(hub_manifest()).relative_to(Path(hub_manifest()).parts[0])
    for folder in [Path(start).resolve(), *Path(start).resolve().parents]:
        if (folder / name).is_file():
            return folder / name
    return None


def local(value: str | None, manifest: str | os.PathLike | None = None) -> str | None:
    """A model or adapter folder as a local path: a hub id becomes its snapshot folder in the
    cache at the commit the manifest recorded (else its own revision). Never the network."""
    if not is_ref(value):
        return value
    ref = parse(value)
    row = read_manifest(manifest).get(ref.id)
    folder = cached(ref, row["commit"] if row else None)
    if folder is None:
        raise HubError(missing_message(ref, "model job"))
    return str(folder)


# --- datasets (rule hub_dataset) -------------------------------------------------------------


def load_split(dataset: str, config: str | None, split: str, manifest: str | os.PathLike | None = None):
    """One (config, split) of a hub dataset as a DataFrame, from its snapshot in the cache at
    the commit the manifest recorded (``datasets.load_dataset`` on the snapshot folder: data
    files in Parquet, JSON or CSV, configs from the dataset card). Never touches the network."""
    ref = parse(dataset_id(dataset))
    row = read_manifest(manifest).get(ref.id)
    folder = cached(ref, row["commit"] if row else None)
    if folder is None:
        raise HubError(missing_message(ref, "rule hub_dataset"))
    import datasets

    where = f"dataset {dataset}" + (f" (config {config})" if config else "")
    try:
        loaded = datasets.load_dataset(str(folder), name=config, split=split)
    except ValueError as e:  # an unknown config or split: datasets names those it has
        raise HubError(f"{where}, split {split!r}: {e}") from None
    except FileNotFoundError as e:
        raise HubError(f"{where}: no data files datasets can read in {folder} ({e})") from None
    return loaded.to_pandas()


def write_dataset(frame, path: str | os.PathLike) -> None:
    """A loaded split as Parquet, atomically (a killed job leaves no file that looks done)."""
    tables.write_raw(frame, path)


def adapter_problems(rows: list[dict], backend: str) -> list[str]:
    """What keeps each downloaded adapter of the manifest ``rows`` from being served by
    ``backend``: :func:`sparta.modelfiles.backend_adapter_problems`, and, where PEFT is
    installed, a config PEFT cannot read (both backends load adapters through its format)."""
    problems = []
    for row in rows:
        if row["kind"] != "adapter":
            continue
        folder = cached(parse(row["id"]), row["commit"])
        if folder is None:
            continue
        problems += backend_adapter_problems(folder, row["id"], backend)
        try:
            import peft
        except ImportError:
            continue
        try:
            peft.PeftConfig.from_pretrained(str(folder))
        except Exception as e:  # noqa: BLE001 - any failure of PEFT's reader is the finding
            problems.append(
                f"{row['id']}: PEFT {peft.__version__} cannot read its adapter_config.json "
                f"({type(e).__name__}: {e}); use an adapter saved by PEFT"
            )
    return problems


# --- the config check: what a run loads from the hub -------------------------------------------


def config_folder(folder, key: str, want: str, notes: list[str] | None):
    """A folder of the config as a folder to check: itself, or for an ``hf://`` hub id its cached
    snapshot folder. An id not in the cache is a note (no problem: an empty list) while rule
    hub_download can fetch it, else a problem naming the command that fetches it."""
    value = str(folder)
    start = value.find(PREFIX.rstrip("/"))
    if start < 0:
        return folder
    value = PREFIX + value[start + len(PREFIX) - 1 :].lstrip("/")  # root / "hf://x" -> "hf:/x"
    try:
        ref = parse(value)
    except HubError as e:
        return [f"{key}: {e}"]
    found = cached(ref)
    if found is None:
        if PLANNING or reachable():
            if notes is not None:
                notes.append(
                    f"{ref.id} ({key}) is not in the Hugging Face cache yet: rule hub_download fetches it"
                )
            return []
        return [missing_message(ref, key)]
    held = kind(found)
    if want == "model" and held == "adapter":
        return [
            f"{key}: {ref.id} holds a PEFT adapter (adapter_config.json), not a full model: give it as a "
            "member's adapter, with the model it adapts as base"
        ]
    if want == "adapter" and held == "model":
        return [
            f"{key}: {ref.id} holds a full model, not a PEFT adapter: give it as a base (or members[].base)"
        ]
    return found


def source_problems(spec, key: str, root: Path, notes: list[str] | None) -> list[str] | None:
    """A prompt set or task read from ``file`` or a hub ``dataset``: a problem when neither or
    both are given, or the dataset is written wrongly; None when its file is there to check,
    [] when a hub dataset's file is not written yet (rule hub_dataset writes it: checked by
    the job that reads it)."""
    if (spec.file is None) == (spec.dataset is None):
        both = spec.file is not None
        merged = " (over config.yaml, whose prompts.file stays: write file: null)" if both else ""
        return [f"{key}: give file (a local file) or dataset (a hub dataset), one of the two{merged}"]
    if spec.dataset is None:
        return None
    try:
        ref = parse(dataset_id(spec.dataset))
    except HubError as e:
        return [f"{key}.dataset: {e}"]
    if (root / spec.source_file()).is_file():
        return None
    if cached(ref) is None and not (PLANNING or reachable()):
        return [missing_message(ref, f"{key}.dataset")]
    if notes is not None:
        notes.append(
            f"{key}: {ref.id} (config {spec.config or 'default'}, split {spec.split}) is written to "
            f"{spec.source_file()} by rule hub_dataset; its columns are checked when it is read"
        )
    return []


def _dataset_ref(value: str) -> str | None:
    try:
        return dataset_id(value)
    except HubError:
        return None  # the config check names it


def dataset_sources(settings) -> list:
    """The prompt settings and evaluation tasks of a run that read a hub dataset (rule
    hub_dataset writes each one's split to Parquet)."""
    found = [settings.prompts] if settings.prompts.dataset else []
    if settings.evaluation.enabled:
        found += [t for t in settings.evaluation.tasks if t.source == "file" and t.dataset]
    return [d for d in found if _dataset_ref(d.dataset) is not None]


def run_ids(settings) -> list[str]:
    """Every ``hf://`` hub id a run loads: its members' bases and adapters, the evaluation
    judge (evaluation on), sppo's annotator (method sppo)."""
    values = [settings.base_folder(m.base) for m in settings.members]
    values += [m.adapter for m in settings.members]
    judge = settings.evaluation.judge
    if settings.evaluation.enabled and judge is not None:
        values += [judge.base, judge.adapter]
    annotator = settings.baselines.annotator
    if settings.method == "sppo" and annotator is not None:
        values += [annotator.base, annotator.adapter]
    values += [_dataset_ref(d.dataset) for d in dataset_sources(settings)]
    return list(dict.fromkeys(v for v in values if is_ref(v)))
