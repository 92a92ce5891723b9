"""Per-round records of a run, written as they happen.

<output-dir>/<run-name>/
  config.json   -- the validated run-config, written once the run (or its resume) is accepted
  data.json     -- the data's fingerprint and source (checked on resume and by every client)
  rounds.jsonl  -- one JSON object per round (round 0 = the initial model), flushed per line
  summary.json  -- written atomically when the last round ends
  .lock         -- held (flock) by the process writing the folder: a second run of it is refused
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping

from .config import ConfigError

ROUND_FIELDS = (
    "round", "test_acc", "test_loss", "f1", "f2_est", "objective", "sampled", "participants", "stragglers",
    "failures", "uplink_bytes", "downlink_bytes", "wall_s", "client_compute_s", "client_compute_max_s",
    "local_steps", "H", "gamma_r",
)


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


class FolderBusy(Exception):
    """Another process holds the folder's lock; ``holder`` is its pid as it wrote it ("?" if unknown)."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def lock_folder(folder: Path) -> int:
    """Take the exclusive flock on FOLDER/.lock for this process and write its pid there; returns the
    descriptor (closing it releases the lock). Raises FolderBusy when another process holds it."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise FolderBusy(holder) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


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
        self.stored_config: dict[str, Any] = {}  # config.json of the run a resume continues
        self.resume_from = None  # the checked checkpoint a resume continues from (zofl.core.rounds.resume_point)
        self._lock_fd: int | None = None
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            if self.rounds_path.exists():
                if not resume:
                    raise RunFolderError(f"run-config key 'run-name': {self.dir} already holds results; choose "
                                         f"another run-name (or set resume = true to continue it)")
                config_path = self.dir / "config.json"
                try:
                    stored = json.loads(config_path.read_text())
                except (OSError, json.JSONDecodeError) as exc:
                    raise RunFolderError(f"cannot resume {self.dir}: {config_path} is not readable ({exc})") from exc
                self.stored_config = stored
                changed = sorted(k for k in set(stored) | set(config)
                                 if k not in RESUMABLE_CHANGES and stored.get(k) != config.get(k))
                if changed:
                    raise RunFolderError(f"run-config key 'resume': cannot resume {self.dir}: the run-config "
                                         f"differs in {changed}")
                self._check_data()
                self.records = read_rounds(self.dir, check_order=True)
        except BaseException:
            self.close()
            raise

    def _check_data(self) -> None:
        """A resume must read the data the run read: the fingerprint in data.json against today's."""
        path = self.dir / "data.json"
        if self.data is None or not path.exists():  # a task without a fingerprint, or a run from before data.json
            return
        try:
            stored = json.loads(path.read_text())
            fp = stored["fingerprint"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise RunFolderError(f"cannot resume {self.dir}: {path} is not readable ({exc})") from exc
        if fp != self.data["fingerprint"]:
            raise RunFolderError(
                f"cannot resume {self.dir}: its data differ from this run's: {path} has fingerprint {fp} "
                f"({stored.get('source')}), the data now read from {self.data['source']} have "
                f"{self.data['fingerprint']} (a different file or data-dir); resume with the run's data, or start "
                f"a new run")

    def _lock(self) -> None:
        try:
            self._lock_fd = lock_folder(self.dir)
        except FolderBusy as exc:
            raise RunFolderError(f"run-config key 'run-name': {self.dir} is in use by another run (pid {exc.holder}); "
                                 f"wait for it to end, stop it, or choose another run-name") from None

    def close(self) -> None:
        """Release the folder's lock (the lock file stays; an unlocked one means nobody writes)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def accept(self) -> None:
        """The run (or resume) is accepted: write config.json, before the first new record."""
        self._atomic_write("config.json", self.config)
        if self.data is not None:
            self._atomic_write("data.json", self.data)

    def truncate(self, last_round: int) -> None:
        """Keep the records of rounds <= last_round (atomically); later ones will be written again."""
        self.records = [r for r in self.records if r["round"] <= last_round]
        self._atomic_write_text(self.rounds_path.name, "".join(json.dumps(r) + "\n" for r in self.records))

    def _atomic_write(self, name: str, obj: Any) -> None:
        self._atomic_write_text(name, json.dumps(obj, indent=2, default=str) + "\n")

    def _atomic_write_text(self, name: str, text: str) -> None:
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.dir / name)

    def write_round(self, record: Mapping[str, Any]) -> None:
        rec = {k: _clean(record.get(k)) for k in ROUND_FIELDS}  # every record has these; then any extra
        rec.update({k: _clean(v) for k, v in record.items() if k not in rec})
        with open(self.rounds_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records.append(rec)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        self._atomic_write("summary.json", {k: _clean(v) for k, v in summary.items()})


def read_rounds(run_dir: str | os.PathLike, check_order: bool = False) -> list[dict[str, Any]]:
    """The records of a run; a torn last line (the process was killed mid-write) is left out.

    A line that is not a JSON record raises ``RunFolderError`` naming the file and line; with
    ``check_order`` the records must be rounds 0, 1, 2, ... (no gap, no duplicate, in order)."""
    path = Path(run_dir) / "rounds.jsonl"
    with open(path) as f:
        lines = list(f)
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            if i == len(lines) - 1 and not line.endswith("\n"):
                break  # torn last line: written again on resume
            raise RunFolderError(f"{path}, line {i + 1}: not a round record ({exc})") from None
        if check_order and rec.get("round") != len(records):
            raise RunFolderError(f"{path}, line {i + 1}: round {rec.get('round')!r} where round {len(records)} "
                                 f"was expected (records must be rounds 0, 1, 2, ... once each)")
        records.append(rec)
    return records
