"""Locks of the runs that work in one folder: each live run keeps its own, a dead one's go.

Snakemake's lock files (``.snakemake/locks/<n>.{input,output}.lock``) are unsafe side by side:
its unlock removes every live run's, and a run killed hard leaves ones that nothing tells from
a live run's (docs/development/engine.md). So, in snakemake's main process (:func:`install`):

* A run (an experiment, or a study: everything under ``results/<name>/``) holds a kernel lock,
  ``.snakemake/sparta-<name>.flock``, until it unlocks or dies; inside, its owner (pid, host,
  start time, command) and the lock files snakemake wrote for it, each with its hash. The
  kernel releases the lock however the process dies, so a run lock that can be taken proves
  its last owner dead. A second snakemake on a held run stops before changing anything,
  naming the running one (:class:`Busy`).
* Lock files are removed only when their owner is provably dead: those a free run lock
  records, and every one when no run lock is held. Unlock removes the run's own lock files;
  ``snakemake --unlock`` everything but the live runs' recorded ones.
* All of this happens under one more kernel lock, ``.snakemake/sparta.flock``, so two runs
  starting together neither pick the same lock file name nor both pass the overlap check.

Dry runs, ``--nolock`` and the jobs snakemake spawns take no lock. Where the file system has no
flock (:data:`NO_FLOCK`: Lustre ``noflock``, NFS without lockd) or with ``SPARTA_LOCKS=none``
(``flock`` is the default), :func:`install` warns once and changes nothing: Snakemake's own
locks apply, as on plain Snakemake.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import sys
import time
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from .internals import require

REGISTRY = "sparta.flock"
REGISTRY_WAIT = 120  # seconds
LOCK_FILE = re.compile(r"\d+\.(input|output)\.lock")
VARIABLE = "SPARTA_LOCKS"
NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}


class Busy(Exception):
    """A live snakemake holds the run (or the registry): the message names it and says what to
    do; snakemake shows it as one error, without a traceback."""


class NoFlock(Exception):
    """The file system of ``.snakemake`` has no flock (one of :data:`NO_FLOCK`): the message
    names the file and the error."""


def _flock(fd: int, path: Path) -> None:
    """Take the kernel lock on ``fd`` or raise BlockingIOError (held); where the file system
    has no flock, close ``fd`` and raise :class:`NoFlock`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in NO_FLOCK:  # BlockingIOError among them: held
            raise
        os.close(fd)
        raise NoFlock(f"flock fails on {path} with {errno.errorcode.get(e.errno, e.errno)}") from None


_registry = {"fd": None, "depth": 0}


@contextmanager
def registry(folder: Path):
    """The lock of the lock registry, reentrant within this process."""
    if _registry["depth"] == 0:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / REGISTRY, os.O_RDWR | os.O_CREAT, 0o664)
        deadline = time.monotonic() + REGISTRY_WAIT
        while True:  # held for milliseconds by whoever has it, unless that process is stopped
            try:
                _flock(fd, folder / REGISTRY)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise Busy(
                        f"sparta: {folder / REGISTRY} stayed locked for {REGISTRY_WAIT} s: a snakemake "
                        "in this folder was stopped (Ctrl-Z, SIGSTOP) while taking or removing its "
                        "locks; resume it (fg) or end it, then run this command again"
                    ) from None
                time.sleep(0.05)
        _registry["fd"] = fd
    _registry["depth"] += 1
    try:
        yield
    finally:
        _registry["depth"] -= 1
        if _registry["depth"] == 0:
            os.close(_registry["fd"])  # closing releases the lock
            _registry["fd"] = None


def _read(fd: int) -> dict:
    try:
        data = os.pread(fd, 1 << 20, 0)
        record = json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write(fd: int, record: dict) -> None:
    """In place: the kernel lock is on this file, so it is never replaced by another."""
    data = json.dumps(record, indent=1).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def describe(record: dict) -> str:
    """``experiment 'x' (snakemake pid 12, host h, started 2025-01-01 10:00:00 UTC)``."""
    if not record.get("pid"):
        return "a run whose owner is not recorded"
    return (
        f"{record.get('kind', 'run')} {record.get('run', '?')!r} (snakemake pid {record['pid']}, "
        f"host {record.get('host', '?')}, started {record.get('started', '?')})"
    )


def lock_files(folder: Path) -> dict[str, Path]:
    """Snakemake's lock files in the folder, by name."""
    lockdir = folder / "locks"
    if not lockdir.is_dir():
        return {}
    return {p.name: p for p in lockdir.iterdir() if LOCK_FILE.fullmatch(p.name) and p.is_file()}


def _claimed(record: dict, files: dict[str, Path]) -> list[str]:
    """The lock files a record claims that still hold what its owner wrote."""
    claims = record.get("lock_files") or {}
    return [name for name, sha in claims.items() if name in files and _sha(files[name]) == sha]


def _runs(folder: Path, skip: Path | None, stack: ExitStack) -> tuple[list[dict], list[tuple[dict, int]]]:
    """The records of the run locks in the folder that a live process holds, and (record, fd) of
    the others, each fd now holding its lock until ``stack`` closes. Only under :func:`registry`."""
    live, dead = [], []
    for path in sorted(folder.glob("sparta-*.flock")):
        if path == skip:
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:  # another user's run: its lock can still be tested
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
        try:
            _flock(fd, path)
        except BlockingIOError:
            live.append(_read(fd))
            os.close(fd)
            continue
        stack.callback(os.close, fd)
        dead.append((_read(fd), fd))
    return live, dead


def clear_stale(
    folder: Path, skip: Path | None = None, keep_unclaimed: bool = True, previous: tuple[dict, ...] = ()
) -> list[str]:
    """Remove the lock files of dead runs; return a line per dead owner whose files went.

    A file recorded by a run lock that can be taken, or by ``previous`` (what this run's last
    owner wrote), is a dead run's. A file recorded by no run is a dead one's too when no run lock
    is held at all; while another run is live it is kept, unless ``keep_unclaimed`` is false
    (``snakemake --unlock``). A live run's files are never removed. Call under :func:`registry`."""
    files = lock_files(folder)
    with ExitStack() as stack:
        live, dead = _runs(folder, skip, stack)
        if not files:
            return []
        kept = {name for record in live for name in _claimed(record, files)}
        removed, lines = set(), []
        for record, fd in [(record, None) for record in previous] + dead:
            names = _claimed(record, files)
            for name in names:
                files[name].unlink(missing_ok=True)
            if fd is not None and record.get("lock_files"):
                with suppress(OSError):  # read-only: the claims no longer match any file anyway
                    _write(fd, {**record, "lock_files": {}})
            if names:
                removed.update(names)
                lines.append(describe(record))
        unclaimed = [name for name in files if name not in removed and name not in kept]
        if unclaimed and (not live or not keep_unclaimed):
            for name in unclaimed:
                files[name].unlink(missing_ok=True)
            lines.append(f"one whose owner is not recorded ({', '.join(sorted(unclaimed))})")
        return lines


def live_runs(folder: Path, skip: Path | None = None) -> list[dict]:
    """The records of the runs whose lock a live process holds. Call under :func:`registry`."""
    with ExitStack() as stack:
        return _runs(folder, skip, stack)[0]


# --- this process's run ------------------------------------------------------------------------

_run = {"name": None, "kind": "run", "fd": None, "path": None, "owner": {}}


def _owner() -> dict:
    """pid, host, start time and command of this process."""
    pid, started, command = os.getpid(), time.time(), sys.argv
    with suppress(Exception):  # psutil comes with snakemake; without it, the time of the parse
        import psutil

        process = psutil.Process(pid)
        started, command = process.create_time(), process.cmdline()
    return {
        "run": _run["name"],
        "kind": _run["kind"],
        "pid": pid,
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "command": " ".join(command)[:500],
    }


def refusal(record: dict, folder: Path) -> str:
    pid, host = record.get("pid", "?"), record.get("host", "?")
    stop = f"kill {pid}" if host == socket.gethostname() else f"kill {pid} on host {host}"
    return (
        f"sparta: {_run['kind']} {_run['name']!r} is already being run in {folder.parent} by "
        f"snakemake pid {pid} on host {host}, started {record.get('started', '?')} "
        f"(command: {record.get('command', '?')}).\n"
        "A second snakemake on the same run would start its running jobs again and delete their "
        "outputs, so this one stops here and has changed nothing. Wait for the running one to "
        "finish (a dry run, snakemake -n with the same config, shows what is left), or stop it "
        f"(Ctrl-C in its terminal, or {stop}) and run this command again: it resumes the run."
    )


def acquire(folder: Path) -> dict:
    """Take this run's lock and return what its previous (dead) owner recorded; raise
    :class:`Busy` naming its holder when it is held. Call under :func:`registry`."""
    if _run["fd"] is not None:
        return {}
    path = folder / f"sparta-{_run['name']}.flock"  # the run's kernel lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        _flock(fd, path)
    except BlockingIOError:
        record = _read(fd)
        os.close(fd)
        raise Busy(refusal(record, folder)) from None
    previous = _read(fd)
    _run.update(fd=fd, path=path, owner=_owner())
    _write(fd, {**_run["owner"], "lock_files": {}})
    return previous


def record_lock_files(paths) -> None:
    """Write into this run's lock the snakemake lock files it owns, with their hashes."""
    owned = {Path(p).name: _sha(Path(p)) for p in paths}
    _write(_run["fd"], {**_run["owner"], "lock_files": {k: v for k, v in owned.items() if v}})


def release() -> None:
    if _run["fd"] is not None:
        _write(_run["fd"], {**_run["owner"], "lock_files": {}})
        os.close(_run["fd"])
        _run.update(fd=None, path=None)


def _announce(lines: list[str]) -> None:
    for line in lines:
        print(f"sparta: removed the locks of a snakemake that died: {line}", file=sys.stderr)


def _overlap_message(persistence, folder: Path) -> str:
    """Which live runs hold the files snakemake found locked, for its LockException."""
    outputs = {str(f) for f in persistence.all_outputfiles()}
    inputs = {str(f) for f in persistence.all_inputfiles()}
    files = lock_files(folder)
    owners = {name: describe(r) for r in live_runs(folder, _run["path"]) for name in _claimed(r, files)}
    held, unknown = [], False
    for name, path in sorted(files.items()):
        try:
            locked = {line.strip() for line in path.read_text().splitlines()}
        except OSError:
            continue
        clash = locked & (outputs | inputs if name.endswith(".output.lock") else outputs)
        if clash:
            unknown |= name not in owners
            owner = owners.get(name, f"a snakemake whose owner is not recorded ({path})")
            held.append(f"  {owner}: {', '.join(sorted(clash)[:3])}{' ...' if len(clash) > 3 else ''}")
    unlock = " A lock file of no recorded owner was left by a snakemake killed while taking its locks: "
    unlock += "snakemake --unlock removes it (and never a live run's)."
    return (
        f"sparta: {_run['kind']} {_run['name']!r} cannot start: a live snakemake in {folder.parent} "
        "writes or reads files that this run would write:\n"
        + "\n".join(dict.fromkeys(held) or ["  (the lock files changed meanwhile)"])
        + "\nWait for it to finish, then run this command again."
        + (unlock if unknown else "")
    )


# --- snakemake's persistence, in the main process --------------------------------------------

_original = {}
_said = set()


@contextmanager
def _refused():
    """Busy, or a flock failing mid-run, as snakemake prints a CliException: ``Error: <message>``,
    no traceback."""
    from snakemake.exceptions import CliException

    try:
        yield
    except Busy as e:
        raise CliException(str(e)) from None
    except NoFlock as e:  # flock worked when this process started
        raise CliException(f"sparta: {e}; to run with Snakemake's own locks: {VARIABLE}=none") from None


def _choice() -> str:
    """``flock`` (the default) or ``none``, from :data:`VARIABLE`."""
    from snakemake.exceptions import WorkflowError

    value = os.environ.get(VARIABLE, "").strip().lower() or "flock"
    if value not in ("flock", "none"):
        raise WorkflowError(f"sparta: {VARIABLE}={value!r}: use flock (the default) or none")
    return value


def _without(why: str) -> None:
    """One line, once a process: sparta's run locks are off, what that loses, what to do."""
    if _said:
        return
    _said.add(why)
    print(
        f"sparta: warning: {why}: sparta's run locks are off (Snakemake's own apply, and the first "
        "run to end removes every run's): run one snakemake at a time in this folder, and after a "
        "hard kill, snakemake --unlock before running again (docs/guides/troubleshooting.md)",
        file=sys.stderr,
    )


def install(workflow, run: str, kind: str = "experiment") -> None:
    """Give this snakemake process's run its own lock (see the module's doc) and remove the
    locks of dead runs now, so that a dry run after a hard kill sees none either. Only in
    snakemake's main process; the jobs it spawns run with --nolock. Without flock (or with
    ``SPARTA_LOCKS=none``) it changes nothing and says so once."""
    if not workflow.is_main_process:
        return
    from snakemake.exceptions import LockException
    from snakemake.persistence import PersistenceBase
    from snakemake.persistence.file import FilePersistence

    _run.update(name=run, kind=kind)
    needed = [(FilePersistence, "_write_locks"), (FilePersistence, "_delete_locks")]
    needed += [(PersistenceBase, "lock"), (PersistenceBase, "cleanup_locks")]
    require("locks", "which sparta's run locks replace", needed)
    if _choice() == "none":
        return _without(f"{VARIABLE}=none")
    folder = Path(".snakemake").absolute()  # snakemake's persistence folder in the workdir
    with _refused():
        try:
            with registry(folder):
                _announce(clear_stale(folder))
        except NoFlock as e:
            return _without(str(e))
    if not _original:
        _original.update(lock=PersistenceBase.lock, cleanup_locks=PersistenceBase.cleanup_locks)

        @contextmanager
        def lock(self):
            folder = Path(self.path)
            with ExitStack() as stack:
                with _refused(), registry(folder):
                    previous = acquire(folder)
                    try:
                        _announce(clear_stale(folder, skip=_run["path"], previous=(previous,)))
                        stack.enter_context(_original["lock"](self))
                        record_lock_files(_lock_files(self))
                    except LockException:  # another live run locks files of this one
                        release()
                        raise Busy(_overlap_message(self, folder)) from None
                    except BaseException:
                        release()
                        raise
                yield

        def delete_locks(self):
            """Unlock: this run's own lock files only (snakemake 9 removes the whole folder)."""
            with _refused(), registry(Path(self.path)):
                for path in self._lockfile.values():
                    Path(path).unlink(missing_ok=True)
                self._lockfile.clear()
                release()

        def cleanup_locks(self):
            """snakemake --unlock: every lock file but the live runs' recorded ones."""
            folder = Path(self.path)
            with _refused(), registry(folder):
                _announce(clear_stale(folder, keep_unclaimed=False))
                for record in live_runs(folder):
                    print(f"sparta: kept the locks of a live run: {describe(record)}", file=sys.stderr)

        PersistenceBase.lock = lock
        PersistenceBase.cleanup_locks = cleanup_locks
        FilePersistence._delete_locks = delete_locks


def _lock_files(persistence) -> list:
    """The lock files Snakemake's lock() just wrote (``FilePersistence._lockfile``, an
    internal: docs/development/private-apis.md); renamed, the run stops naming it rather than
    leave its lock files unrecorded."""
    from snakemake.exceptions import WorkflowError

    try:
        return list(persistence._lockfile.values())
    except AttributeError:
        raise WorkflowError(
            "Snakemake's FilePersistence has no '_lockfile' (an internal sparta's run locks read): "
            "this Snakemake is not the tested one; run with SPARTA_ENGINE=plain"
        ) from None
