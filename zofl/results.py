"""Per-round records of a run, written as they happen.

<output-dir>/<run-name>/
  config.json   -- the validated run-config, written once the run (or its resume) is accepted
  data.json     -- the data's fingerprint and source (checked on resume and by every client)
  rounds.jsonl  -- one JSON object per round (round 0 = the initial model), flushed per line
  summary.json  -- written atomically when the last round ends
  .lock         -- held (flock) by the process writing the folder: a second run of it is refused;
                   removed when the run ends (left only by a killed run, and then free)

Every file of the folder is opened without following a symbolic link (O_NOFOLLOW), and every file
zofl writes is first created by zofl itself (O_CREAT|O_EXCL on a temporary name, then renamed over
the real one): a link planted in the folder is refused by name, never written through. The folder
itself may be reached through links (an output-dir on a linked scratch disk is common); the lock is
on the inode of FOLDER/.lock, so two paths to one folder still exclude each other.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any, Mapping

from .config import ConfigError
from .core.protocol import MAX_FINGERPRINT
from .core.record import COUNT_FIELDS, ROUND_FIELDS  # noqa: F401  (ROUND_FIELDS: also the runner's CSV columns)
from .packed import packed_records
from .safeio import (
    JSON_CAP,
    RECORD_CAP,
    ROUNDS_CAP,
    FileRefused,
    load_json,
    open_regular,
    read_fd,
    read_json,
    read_lines,
)

CHECKPOINT_FILE = "checkpoint.npz"  # zofl.core.checkpoint
RESTORE_RECORDS = "restore the file, or start a new run (another run-name)"
# the files of a run folder, with the temporary names they are written under: none may be a link
RUN_FILES = ("config.json", "data.json", "rounds.jsonl", "summary.json", CHECKPOINT_FILE, ".lock",
             ".config.json.tmp", ".data.json.tmp", ".rounds.jsonl.tmp", ".summary.json.tmp",
             f".{CHECKPOINT_FILE}.tmp.npz")


def _clean(v: Any) -> Any:
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def default_run_name(strategy: str, dataset: str) -> str:
    return f"{strategy}-{dataset}-{time.strftime('%Y%m%d-%H%M%S')}"


RESUMABLE_CHANGES = ("resume", "checkpoint-every", "client-wait-s", "num-rounds")  # may differ on resume


class RunFolderError(ConfigError):
    """A run folder cannot be used as asked (in use, holds results, unreadable or inconsistent);
    the message names the folder or file (and line)."""


# -- files opened without following links ------------------------------------------------------
def _not_regular(path: Path) -> RunFolderError:
    """The refusal for a link (or a directory, FIFO, ...) where a run file belongs."""
    if os.path.islink(path):
        return RunFolderError(f"{path} is a symbolic link (to {os.readlink(path)}); a run folder's files are "
                              f"never links and zofl does not follow them: remove it, or choose another run-name")
    return RunFolderError(f"{path} is not a regular file; a run folder holds only zofl's files: remove it, or "
                          f"choose another run-name")


def check_run_files(folder: Path) -> None:
    """Refuse a folder where any of zofl's files (or their temporary names) is a link or not a regular
    file, before anything is written: a write through it would land outside the folder."""
    for name in RUN_FILES:
        path = folder / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path)


def open_nofollow(path: Path, flags: int, mode: int = 0o666) -> int:
    """os.open without following a link at ``path`` (and not inherited by exec'd programs);
    a link, or anything but a regular file, is a ``RunFolderError`` naming it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.EEXIST, errno.ENXIO) and os.path.lexists(path):
            raise _not_regular(path) if exc.errno != errno.EEXIST else RunFolderError(
                f"{path} appeared while zofl was creating it: another process writes this run folder; stop it, "
                f"or choose another run-name") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_regular(path)
    return fd


def read_text(path: Path, cap: int = JSON_CAP) -> str:
    """A run file's text, read without following a link and at most ``cap`` bytes (``zofl.safeio.read_fd``:
    a larger file is a FileRefused naming it)."""
    fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return read_fd(fd, path, cap, f"run's {path.name}").decode("utf-8")
    finally:
        os.close(fd)


def create_new(folder: Path, name: str) -> int:
    """A descriptor of the file FOLDER/NAME, created by this call (O_CREAT|O_EXCL, so never an existing
    file nor a link's target); a regular file left there by a killed run is removed first."""
    path = folder / name
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise _not_regular(path)
        os.unlink(path)  # a leftover temporary file of a killed run
    except FileNotFoundError:
        pass
    return open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)


def write_atomic(folder: Path, name: str, data: bytes) -> None:
    """FOLDER/NAME replaced by ``data`` at once: written to a new .NAME.tmp, then renamed over it
    (rename replaces a link rather than following it)."""
    tmp = f".{name}.tmp"
    with os.fdopen(create_new(folder, tmp), "wb") as f:
        f.write(data)
    os.replace(folder / tmp, folder / name)


# -- which run wrote a file ------------------------------------------------------------------
def file_version(path: Path) -> tuple[int, int, int] | None:
    """Which version of a file this is (inode, mtime, size): our files are replaced atomically, so a
    file written by this run has a stamp other than the one it had before the run started."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def run_outcome(out: Path, before: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """(this run's summary or None, whether this run's ServerApp accepted the folder), judged only by
    files this run wrote: the ServerApp writes config.json when it accepts the run (or its resume) and
    summary.json when its last round ends, both by atomic replacement; a file whose stamp did not
    change since the start was left by an earlier run and says nothing about this one."""
    accepted = file_version(out / "config.json") not in (None, before["config.json"])
    if not accepted or file_version(out / "summary.json") in (None, before["summary.json"]):
        return None, accepted
    try:
        summary = read_json(out / "summary.json", JSON_CAP, "run's summary.json")  # bounded: zofl.safeio
    except (OSError, ValueError):
        return None, accepted
    return (summary if isinstance(summary, dict) and summary.get("results_dir") else None), accepted


# -- the folder's lock -------------------------------------------------------------------------
class FolderBusy(Exception):
    """Another process holds the folder's lock; ``holder`` is the pid that took it, as it wrote it ("?" if
    unknown); ``stale``: that process is gone, and ``holders`` (pids, if found) still hold the file open."""

    def __init__(self, holder: str, stale: bool = False, holders: tuple[int, ...] = ()):
        super().__init__(holder)
        self.holder, self.stale, self.holders = holder, stale, holders


# descriptor -> ((st_dev, st_ino), path) of each lock file this process took (the path: unlock_folder(remove=True))
_HELD: dict[int, tuple[tuple[int, int], Path]] = {}


def _close_inherited_locks() -> None:
    """In a forked child (``os.register_at_fork``): close the lock descriptors the parent holds. A child
    shares the parent's open file description, so it held the flock too and kept it after the parent
    died (in-process worker pools: 'in use by another run (pid <dead pid>)'). Closing its copy never
    releases the parent's lock (only the last close of the description does); unlocking would. The
    descriptor is closed only if it is still the lock file (a number closed elsewhere may be reused)."""
    for fd, (ident, _) in list(_HELD.items()):
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == ident:
                os.close(fd)
        except OSError:
            pass
    _HELD.clear()


# every fork (multiprocessing's fork and forkserver children, os.fork) drops the lock, whoever forks;
# exec'd programs never get it (O_CLOEXEC). A pool initializer would cover one pool only.
os.register_at_fork(after_in_child=_close_inherited_locks)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not: its descriptors, and locks, are gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _processes_holding(st: os.stat_result) -> tuple[int, ...]:
    """The pids (other than this one) with the file ``st`` open, as far as /proc shows them (Linux, own
    processes); () where it cannot be told. Only looked up to say whom to stop."""
    found = set()
    try:
        procs = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return ()
    for pid in procs:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                s = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
                found.add(int(pid))
                break
    return tuple(sorted(found))


def lock_folder(folder: Path, name: str = ".lock") -> int:
    """Take the exclusive flock on FOLDER/NAME (.lock: the run's writer; zofl run also holds .cli.lock)
    for this process and write its pid there; returns the descriptor (``unlock_folder`` or closing it
    releases the lock). Raises FolderBusy when another process holds it. A flock dies with the last process
    holding it, so a lock nobody holds is simply taken; the
    descriptor is not inherited by forked children (``_close_inherited_locks``) nor exec'd programs.

    A holder may remove the file as it lets go (``unlock_folder(fd, remove=True)``), so a lock taken on a file
    that is no longer FOLDER/NAME (removed, or replaced by a newer one, between our open and our flock) is
    no lock: it is dropped and taken again on the file now there."""
    path = folder / name
    while True:
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            stale = holder.isdigit() and not _alive(int(holder))
            holders = _processes_holding(os.fstat(fd)) if stale else ()
            os.close(fd)
            raise FolderBusy(holder, stale, holders) from None
        st = os.fstat(fd)
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            break
        os.close(fd)  # its holder removed it as we opened it: lock the file that is there now
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _HELD[fd] = ((st.st_dev, st.st_ino), path)
    return fd


def unlock_folder(fd: int, remove: bool = False) -> None:
    """Release a lock taken by ``lock_folder`` (closing the descriptor releases the flock). With ``remove``,
    the lock file is removed first, while still held, if it is still the file this descriptor locks: a
    finished run leaves no lock file behind, and a process that opened it meanwhile sees it gone and
    retries (``lock_folder``)."""
    ident, path = _HELD.pop(fd, (None, None))
    if remove and path is not None:
        with contextlib.suppress(OSError):
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) == ident:
                os.unlink(path)
    os.close(fd)


def busy_message(folder: Path, exc: FolderBusy) -> str:
    """Why FOLDER cannot be written now, and what to do, in one line."""
    if not exc.stale:
        return (f"run-config key 'run-name': {folder} is in use by another run (pid {exc.holder}); wait for it to "
                f"end, stop it, or choose another run-name")
    lock = folder / ".lock"
    who = (f"process(es) {', '.join(map(str, exc.holders))} still hold {lock} open (started by it, e.g. its "
           f"in-process workers); stop them (kill {' '.join(map(str, exc.holders))})" if exc.holders else
           f"a process it started still holds {lock} open; stop it (`fuser -v {lock}` names it)")
    return (f"run-config key 'run-name': {folder} is locked, but the run that locked it (pid {exc.holder}) is no "
            f"longer running: {who} and run again, or choose another run-name")


# -- the writer --------------------------------------------------------------------------------
def run_json_text(obj: Any) -> str:
    """A run folder's JSON file (config.json, data.json, summary.json) as text, the one format they are written in."""
    return json.dumps(obj, indent=2, default=str) + "\n"


class ResultsWriter:
    """Appends round records as they happen; with ``resume`` continues a run folder's records.

    Opening it takes the folder's lock (``RunFolderError`` if another live process holds it) and
    reads and checks what a resume would continue; nothing is written until ``accept()`` (config.json),
    so a refused run or resume leaves the folder as it was. Use it as a context manager, or
    ``close()`` it, to release the lock."""

    def __init__(self, out_dir: str | os.PathLike, config: Mapping[str, Any], resume: bool = False,
                 data: Mapping[str, str] | None = None):
        self.dir = Path(out_dir).expanduser()
        self.rounds_path = self.dir / "rounds.jsonl"
        self.records: list[dict[str, Any]] = []
        self.config = dict(config)
        self.data = dict(data) if data else None  # data.json: the data's fingerprint and source (zofl.setup)
        self.clients: dict[str, str] = {}  # data.json "clients": partition -> the fingerprint of its node's own data
        self.stored_config: dict[str, Any] = {}  # config.json of the run a resume continues
        self.resume_from = None  # the checked checkpoint a resume continues from (zofl.core.run.resume_point)
        self.startup = None  # this process's start-up (zofl.core.startup.Startup), set by server_app.make_run
        self._lock_fd: int | None = None
        self._lock_pid = os.getpid()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            check_run_files(self.dir)
            if not resume and any((self.dir / n).exists() for n in (self.rounds_path.name, CHECKPOINT_FILE)):
                raise RunFolderError(f"run-config key 'run-name': {self.dir} already holds results; choose "
                                     f"another run-name (or set resume = true to continue it)")
            if self.rounds_path.exists():
                self.stored_config = self._read_config()
                self._check_data()
                self.records = read_rounds(self.dir, check_order=True)
        except BaseException:
            self.close()
            raise

    def _read_config(self) -> dict[str, Any]:
        """config.json of the run to continue: a JSON object equal to this run-config but for
        RESUMABLE_CHANGES (of which 'checkpoint-every' is read back: an integer >= 0)."""
        path = self.dir / "config.json"
        try:
            stored = load_json(read_text(path), str(path))
        except FileRefused as exc:  # a FIFO, larger than JSON_CAP, nested too deep: the message names the rule
            raise RunFolderError(f"cannot resume {self.dir}: {exc}; restore it, or start a new run (another "
                                 f"run-name)") from None
        except (OSError, ValueError) as exc:
            raise RunFolderError(f"cannot resume {self.dir}: {path} is not readable ({exc}); restore it, or start "
                                 f"a new run (another run-name)") from None
        if not isinstance(stored, dict):
            raise RunFolderError(f"cannot resume {self.dir}: {path} is not a JSON object (a run-config); restore "
                                 f"it, or start a new run (another run-name)")
        every = stored.get("checkpoint-every", 0)
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise RunFolderError(f"cannot resume {self.dir}: {path} has 'checkpoint-every' = {every!r}, not an "
                                 f"integer >= 0; restore it, or start a new run (another run-name)")
        changed = sorted(k for k in set(stored) | set(self.config)
                         if k not in RESUMABLE_CHANGES and stored.get(k) != self.config.get(k))
        if changed:
            raise RunFolderError(f"run-config key 'resume': cannot resume {self.dir}: the run-config "
                                 f"differs in {changed}; resume with the run's run-config ({path}), or start a new "
                                 f"run (another run-name)")
        return stored

    def _check_data(self) -> None:
        """A resume must read the data the run read: the fingerprint in data.json against today's.

        data.json is required whenever the task gives a fingerprint: it is written with config.json,
        and a folder from before data.json existed cannot be resumed anyway (its config.json lacks the
        run-config keys added with it, e.g. 'aggregation'), so a missing one was deleted."""
        path = self.dir / "data.json"
        if self.data is None:  # a task without a fingerprint
            return
        if not os.path.lexists(path):
            raise RunFolderError(f"cannot resume {self.dir}: {path} is missing: it holds the fingerprint of the "
                                 f"data the run read, without which the data cannot be checked; restore it, or "
                                 f"start a new run (another run-name)")
        try:
            stored = load_json(read_text(path), str(path))
            fp = stored["fingerprint"]
            if not isinstance(fp, str):
                raise TypeError(f"fingerprint {fp!r} is not a string")
        except FileRefused as exc:
            raise RunFolderError(f"cannot resume {self.dir}: {exc}; restore it, or start a new run (another "
                                 f"run-name)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunFolderError(f"cannot resume {self.dir}: {path} is not readable ({type(exc).__name__}: {exc}); "
                                 f"restore it, or start a new run (another run-name)") from None
        self.clients = self._stored_clients(stored, path)
        if fp != self.data["fingerprint"]:
            raise RunFolderError(
                f"cannot resume {self.dir}: its data differ from this run's: {path} has fingerprint {fp} "
                f"({stored.get('source')}), the data now read from {self.data['source']} have "
                f"{self.data['fingerprint']} (a different file or data-dir); resume with the run's data, or start "
                f"a new run")

    def _stored_clients(self, stored: dict, path: Path) -> dict[str, str]:
        """data.json's "clients" ({partition: fingerprint}, of the nodes that held data of their own), checked."""
        clients = stored.get("clients", {})
        if not isinstance(clients, dict) or not all(
                isinstance(k, str) and k.isdigit() and isinstance(v, str) and 0 < len(v) <= MAX_FINGERPRINT
                for k, v in clients.items()):
            raise RunFolderError(f"cannot resume {self.dir}: {path}'s \"clients\" is not an object of partition ids "
                                 f"and fingerprints; restore it, or start a new run (another run-name)")
        return dict(clients)

    def changed_clients(self, fingerprints: Mapping[int, str]) -> dict[int, str]:
        """The partitions whose node's own data differ from those the run began with ({partition: why}); the
        others' fingerprints are kept for data.json (written by ``accept``): a resume checks its nodes by them."""
        changed = {}
        for pid, fp in sorted(fingerprints.items()):
            was = self.clients.setdefault(str(pid), fp)
            if was != fp:
                changed[pid] = (f"its data changed since the run began (fingerprint {fp}, the run's {was}): resume "
                                f"with the node's data as they were, or start a new run")
        return changed

    def _lock(self) -> None:
        try:
            self._lock_fd = lock_folder(self.dir)
        except FolderBusy as exc:
            raise RunFolderError(busy_message(self.dir, exc)) from None

    def close(self) -> None:
        """Release the folder's lock and remove its file (a finished run leaves only its results). In a
        forked child the descriptor is not the lock (``_close_inherited_locks`` closed it): nothing to do."""
        if self._lock_fd is not None and os.getpid() == self._lock_pid:
            unlock_folder(self._lock_fd, remove=True)
        self._lock_fd = None

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def accept(self) -> None:
        """The run (or resume) is accepted: write config.json, before the first new record."""
        self._atomic_write("config.json", self.config)
        if self.data is not None:
            self._atomic_write("data.json", {**self.data, **({"clients": self.clients} if self.clients else {})})

    def truncate(self, last_round: int) -> None:
        """Keep the records of rounds <= last_round (atomically); later ones will be written again."""
        self.records = [r for r in self.records if r["round"] <= last_round]
        self._atomic_write_text(self.rounds_path.name, "".join(json.dumps(r) + "\n" for r in self.records))

    def _atomic_write(self, name: str, obj: Any) -> None:
        self._atomic_write_text(name, run_json_text(obj))

    def _atomic_write_text(self, name: str, text: str) -> None:
        write_atomic(self.dir, name, text.encode("utf-8"))

    def write_round(self, record: Mapping[str, Any], sync: bool = True) -> None:
        """Append ``record`` to rounds.jsonl, written through at once (a killed process loses none); with ``sync``
        also forced to the disk (fsync), which a run asks for with each checkpoint and the last round only, so that
        a checkpoint that outlives a crash of the machine has every record before it (an fsync per record was
        29% of a small run's wall time)."""
        rec = clean_record(record)
        fd = open_nofollow(self.rounds_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            if sync:
                os.fsync(f.fileno())
        self.records.append(rec)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        self._atomic_write("summary.json", {k: _clean(v) for k, v in summary.items()})


def clean_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A round record as it is written: every ROUND_FIELDS field (null where absent), then any extra, each value
    made JSON-safe (``_clean``)."""
    rec = {k: _clean(record.get(k)) for k in ROUND_FIELDS}
    rec.update({k: _clean(v) for k, v in record.items() if k not in rec})
    return rec


class MemoryWriter:
    """A run's records kept in memory, no folder (a user's App that gave no results folder: ``zofl.strategies.
    app``); the same interface as ``ResultsWriter``, whose records it holds as they would have been written."""

    dir = None  # no folder: no checkpoint (checkpoint-every = 0), no resume

    def __init__(self, config: Mapping[str, Any]):
        self.config = dict(config)
        self.records: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        self.resume_from = None
        self.stored_config: dict[str, Any] = {}
        self.startup = None  # unknown: a user's App starts inside the user's ServerApp (zofl.core.startup)

    def accept(self) -> None:
        """Nothing to write."""

    def truncate(self, last_round: int) -> None:
        self.records = [r for r in self.records if r["round"] <= last_round]

    def write_round(self, record: Mapping[str, Any], sync: bool = True) -> None:
        self.records.append(clean_record(record))

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        self.summary = {k: _clean(v) for k, v in summary.items()}

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> "MemoryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_run_json(path: str | os.PathLike) -> dict[str, Any]:
    """A run's config.json, summary.json or data.json as a dict, read by ``zofl.safeio.read_json`` (a regular file,
    at most JSON_CAP bytes, nested at most MAX_DEPTH levels): ``FileRefused`` as it is, ``RunFolderError`` naming
    the file when it is no JSON object (the one reader of these files: zofl compare, zofl plot, zofl.study)."""
    path = Path(path)
    try:
        value = read_json(path, JSON_CAP, f"run's {path.name}")
    except FileRefused:
        raise
    except (OSError, ValueError) as exc:
        raise RunFolderError(f"{path}: not a run's {path.name} ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:200]})") from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{path}: not a run's {path.name} (not a JSON object)")
    return value


# -- reading records back ----------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    """A number as a record holds it (NaN and Inf are written as null)."""
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(p) for p in v)


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why a record cannot be continued from, or None: the fields of ROUND_FIELDS missing or of another
    type ('round' an integer, 'sampled' a list of client ids, the rest numbers or null), or a field the
    summary totals that is not a number (COUNT_FIELDS), a list of client ids ('failed_clients') or a bool
    ('round_failed')."""
    missing = [k for k in ROUND_FIELDS if k not in rec]
    if missing:
        return f"fields {missing} missing"
    if not _is_int(rec["round"]):
        return f"'round' is {rec['round']!r}, not an integer"
    if not _int_list(rec["sampled"]):
        return f"'sampled' is {rec['sampled']!r}, not a list of client ids"
    for k in ROUND_FIELDS[1:] + COUNT_FIELDS:
        if k != "sampled" and not _is_number(rec.get(k)):
            return f"{k!r} is {rec[k]!r}, not a number"
    if "failed_clients" in rec and not _int_list(rec["failed_clients"]):
        return f"'failed_clients' is {rec['failed_clients']!r}, not a list of client ids"
    if not isinstance(rec.get("round_failed", False), bool):
        return f"'round_failed' is {rec['round_failed']!r}, not true or false"
    return None


def read_rounds(run_dir: str | os.PathLike, check_order: bool = False) -> list[dict[str, Any]]:
    """The records of a run; a torn last line (the process was killed mid-write) is left out.

    A line that is not a JSON record raises ``RunFolderError`` naming the file and line; with
    ``check_order`` (a resume: the file is read without following a link) each record must have
    the fields a resume reads back (``record_problem``) and the records must be rounds 0, 1, 2, ...
    (no gap, no duplicate, in order). A cell of a packed study (STUDY/rounds.parquet, zofl.packed) whose
    rounds.jsonl is gone is read from the packed file (not for a resume: ``check_order``)."""
    path = Path(run_dir) / "rounds.jsonl"
    if not check_order and not os.path.lexists(path):
        packed = packed_records(run_dir)
        if packed is not None:
            return packed
    fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK) if check_order else open_regular(path, RECORDS)
    try:
        with os.fdopen(fd, "rb") as f:  # every line decoded before any is parsed: binary is "not text" at once
            lines = list(read_lines(f, path, RECORD_CAP, ROUNDS_CAP, RECORDS, "round record"))
        return _records(path, lines, check_order)
    except FileRefused as exc:  # larger than ROUNDS_CAP, a line past RECORD_CAP, nested too deep
        raise RunFolderError(f"{exc}" + (f"; {RESTORE_RECORDS}" if check_order else "")) from None


RECORDS = "run's rounds.jsonl"  # what messages call the file


def _records(path: Path, lines: list[str], check_order: bool) -> list[dict[str, Any]]:
    """The records of the ``lines`` of ``path`` (``read_rounds``), each line parsed with a bound on its nesting
    (``zofl.safeio.load_json``)."""
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = load_json(line, f"{path}, line {i + 1}")
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except FileRefused:
            raise
        except ValueError as exc:
            if i == len(lines) - 1 and not line.endswith("\n"):
                break  # torn last line: written again on resume
            raise RunFolderError(f"{path}, line {i + 1}: not a round record ({exc})"
                                 + (f"; {RESTORE_RECORDS}" if check_order else "")) from None
        if check_order:
            problem = record_problem(rec)
            if problem:
                raise RunFolderError(f"{path}, line {i + 1}: not a round record ({problem}); {RESTORE_RECORDS}")
            if rec["round"] != len(records):
                raise RunFolderError(f"{path}, line {i + 1}: round {rec['round']!r} where round {len(records)} "
                                     f"was expected (records must be rounds 0, 1, 2, ... once each); {RESTORE_RECORDS}")
        records.append(rec)
    return records
