"""Per-round records of a run, written as they happen.

<output-dir>/<run-name>/
  config.json   -- the validated run-config
  rounds.jsonl  -- one JSON object per round (round 0 = the initial model), flushed per line
  summary.json  -- written atomically when the last round ends
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping

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


class ResultsWriter:
    """Appends round records as they happen; with ``resume`` continues a run folder's records."""

    def __init__(self, out_dir: str | os.PathLike, config: Mapping[str, Any], resume: bool = False):
        self.dir = Path(out_dir).expanduser()
        self.rounds_path = self.dir / "rounds.jsonl"
        self.records: list[dict[str, Any]] = []
        if self.rounds_path.exists():
            if not resume:
                raise FileExistsError(f"{self.dir} already holds results; choose another run-config 'run-name' "
                                      f"(or set resume = true to continue it)")
            stored = json.loads((self.dir / "config.json").read_text())
            changed = sorted(k for k in set(stored) | set(config)
                             if k not in RESUMABLE_CHANGES and stored.get(k) != config.get(k))
            if changed:
                raise FileExistsError(f"cannot resume {self.dir}: the run-config differs in {changed}")
            self.records = read_rounds(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._atomic_write("config.json", dict(config))

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


def read_rounds(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a run; a torn last line (the process was killed mid-write) is left out."""
    with open(Path(run_dir) / "rounds.jsonl") as f:
        lines = [line for line in f if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1 or line.endswith("\n"):
                raise
    return records
