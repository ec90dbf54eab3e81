"""A failing rerun keeps the previous outputs: moved aside before the job, back if it fails.

Snakemake deletes a job's existing outputs before it runs (``Job.remove_existing_output``) and
a failed job's outputs after it (``Job.cleanup``), so a job that reruns over a finished run and
fails loses the finished outputs it was to replace. Instead, in every snakemake process
(:func:`install`):

* before a job runs, its existing outputs are renamed (same inode, mtime kept) into
  ``.snakemake/sparta-previous/<job>/`` (``<job>``: a digest of the job's output paths);
* when it fails, Snakemake's removal of its outputs puts those back instead (hard links, a copy
  where a link is impossible), and the main process (the only one that writes Snakemake's
  metadata records) gives them back their records, so reverting the setting that failed
  reruns nothing;
* the set-aside files go when the main process has handled the job.

On a cluster the snakemake on the node prepares the job, on the shared file system; both it
and the main process restore on failure (the restore is idempotent). A job whose main process
is killed leaves its set-aside files; the next run (:func:`recover`, at its start) puts back
each whose file is missing or was left incomplete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from . import integrity
from .internals import require

FOLDER = "sparta-previous"  # under snakemake's persistence folder (.snakemake)
INDEX = "outputs.json"  # in a job's folder: path -> key of Snakemake's metadata record


def job_folder(job) -> Path:
    outputs = "\n".join(sorted(str(f) for f in job.output))
    try:
        root = Path(job.dag.workflow.persistence.path)
    except AttributeError:
        root = Path(".snakemake")
    return root / FOLDER / hashlib.sha256(outputs.encode()).hexdigest()[:20]


def _stored(folder: Path, path: str) -> Path:
    p = Path(os.path.abspath(path))
    return folder / "files" / p.relative_to(p.anchor)


def _read_index(folder: Path) -> dict:
    try:
        return json.loads((folder / INDEX).read_text())
    except (OSError, ValueError):
        return {}


def set_aside(job, outputs) -> int:
    """Move the existing ``outputs`` of ``job`` into its folder; return how many."""
    existing = [str(f) for f in outputs if os.path.lexists(f)]
    if not existing:
        return 0
    folder = job_folder(job)
    index = _read_index(folder)
    for path in existing:
        stored = _stored(folder, path)
        if stored.exists():  # set aside by an earlier attempt not yet handled: that one is
            os.unlink(path)  # the finished version; this one is a failed attempt's restore
            continue
        stored.parent.mkdir(parents=True, exist_ok=True)
        index[path] = os.path.abspath(path)
        (folder / INDEX).write_text(json.dumps(index, indent=1))
        shutil.move(path, stored)  # a rename on one file system: same inode, same mtime
    return len(existing)


def _put_back(stored: Path, path: str) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(stored, path)
    except OSError:  # another file system, or no hard links there
        shutil.copy2(stored, path)


def restore(folder: Path, only=None) -> list[str]:
    """Put the set-aside files of a job folder back (all, or those in ``only``); keep the
    folder. Return their paths."""
    back = []
    for path in _read_index(folder):
        stored = _stored(folder, path)
        if stored.exists() and (only is None or path in only):
            _put_back(stored, path)
            back.append(path)
    return back


def discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _say(line: str) -> None:
    print(f"sparta: {line}", file=sys.stderr, flush=True)


_original = {}


def install(workflow) -> None:
    """Replace Snakemake's deletion of a job's outputs before it runs and after it fails (see the
    module's doc). In every snakemake process: on a cluster the node's process prepares the job."""
    from snakemake.jobs import Job
    from snakemake.persistence import PersistenceBase

    needed = [(Job, n) for n in ("remove_existing_output", "cleanup", "postprocess")]
    needed += [(PersistenceBase, n) for n in ("_get_key", "_read_record", "_write_record", "_delete_record")]
    require("keep", "which sparta replaces to keep a failed job's previous outputs", needed)
    if _original:
        return
    _original.update(remove=Job.remove_existing_output, cleanup=Job.cleanup, postprocess=Job.postprocess)
    from snakemake.io import is_flagged

    async def remove_existing_output(self):
        """Move the outputs aside instead of deleting them; the logs go as before."""
        moved = set_aside(self, [f for f in self.output if not is_flagged(f, "update")])
        if moved:
            _say(f"set aside the {moved} previous output file(s) of {self.rule.name} ({job_folder(self)})")
        await _original["remove"](self)  # nothing left of the outputs but the update-flagged ones

    async def cleanup(self, skip_outputs):
        """A failed job: its previous outputs back in place of what it left."""
        folder = job_folder(self)
        back = restore(folder) if folder.is_dir() else []
        await _original["cleanup"](self, [*skip_outputs, *[f for f in self.output if str(f) in back]])
        if back:
            _say(f"{self.rule.name} failed: its {len(back)} previous output file(s) are back, unchanged")

    async def postprocess(self, *args, error=False, **kwargs):
        main = self.dag.workflow.is_main_process
        persistence = self.dag.workflow.persistence
        records = {}
        if main and error:  # the finished files' records, before Snakemake records the failure
            records = {str(f): persistence._read_record(persistence._get_key(f)) for f in self.output}
        folder = job_folder(self)

        def put_back():
            """Again: Snakemake may have removed what a node's process restored."""
            for path in restore(folder):
                key = persistence._get_key(next(f for f in self.output if str(f) == path))
                if records.get(path) is not None:
                    persistence._write_record(key, records[path])
                else:
                    persistence._delete_record(key)
            persistence._clear_cache()

        try:
            await _original["postprocess"](self, *args, error=error, **kwargs)
        except BaseException:
            if main and error and folder.is_dir():
                put_back()
                discard(folder)
            raise  # a success whose outputs fail Snakemake's checks: it calls this again, as failed
        if main and not error:  # the finished outputs' size and content, checked at each start
            for f in self.output:
                integrity.record(Path(persistence.path), str(f))
        if not main or not folder.is_dir():
            return
        if error:
            put_back()
        discard(folder)

    Job.remove_existing_output = remove_existing_output
    Job.cleanup = cleanup
    Job.postprocess = postprocess


def recover(workflow, folders) -> None:
    """At the start of a run (its lock held): set-aside files of this run's jobs (their outputs
    under ``folders``) whose main process died go back where their file is missing or was left
    incomplete (its job is rerun either way: it is set aside again first). Another live run's
    jobs in the same working directory are left alone."""
    root = Path(workflow.persistence.path) / FOLDER
    if not root.is_dir():
        return
    persistence = workflow.persistence
    prefixes = tuple(os.path.join(os.path.abspath(f), "") for f in folders)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        paths = list(_read_index(folder))
        if not paths or not all(os.path.abspath(p).startswith(prefixes) for p in paths):
            continue
        incomplete = persistence._filter_incomplete_keys(paths)
        back = restore(folder, only={p for p in paths if not os.path.lexists(p) or p in incomplete})
        for path in back:
            persistence._unmark_incomplete(path)
        if back:
            _say(f"put back {len(back)} file(s) that an interrupted run had set aside: {', '.join(back)}")
        discard(folder)
    persistence._clear_cache()
