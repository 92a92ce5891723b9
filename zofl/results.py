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


class ResultsWriter:
    def __init__(self, out_dir: str | os.PathLike, config: Mapping[str, Any]):
        self.dir = Path(out_dir).expanduser()
        if (self.dir / "rounds.jsonl").exists():
            raise FileExistsError(f"{self.dir} already holds results; choose another run-config 'run-name'")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._atomic_write("config.json", dict(config))
        self.rounds_path = self.dir / "rounds.jsonl"
        self.records: list[dict[str, Any]] = []

    def _atomic_write(self, name: str, obj: Any) -> None:
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
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
    with open(Path(run_dir) / "rounds.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]
