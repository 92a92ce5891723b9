"""A study (a ``zofl compare`` results folder: STUDY/cells/<id>/ run folders) as a whole: its finished runs
(``study_runs``, what a report script reads) and its records packed into STUDY/rounds.parquet (``pack``; the
file's format is ``zofl.packed``'s).

    python -m zofl.study STUDY [STUDY ...] [--remove | --remove-csv]

packs each study (the cells' rounds.jsonl and any records already packed) into STUDY/rounds.parquet
and reads every record back; with ``--remove`` it then deletes the cells' rounds.jsonl and the
study's rounds.csv (derived from them), with ``--remove-csv`` the rounds.csv only.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .packed import PACKED, packed_records, read_packed, same_json, write_packed
from .results import read_rounds, read_run_json


def study_runs(study: str | os.PathLike) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(cell, config, records) of each finished cell of a study (summary.json present, status not
    "failed"), in the cells' name order, packed or not: what a report script reads."""
    study = Path(study)
    out = []
    for d in sorted((study / "cells").iterdir()) if (study / "cells").is_dir() else []:
        if not (d / "summary.json").is_file() or not (d / "config.json").is_file():
            continue
        if read_run_json(d / "summary.json").get("status") == "failed":
            continue
        out.append((d.name, read_run_json(d / "config.json"), read_rounds(d)))
    return out


def pack(study: str | os.PathLike, remove: bool = False, remove_csv: bool = False,
         known: dict[str, list[dict[str, Any]]] | None = None) -> tuple[int, int]:
    """Pack STUDY's records into STUDY/rounds.parquet; returns (cells, records). Every cell folder
    with records is packed: from its rounds.jsonl, or, where that is gone, from the file packed
    before (a cell with no record yet is left out). Each record read back is checked against its
    source; then with ``remove`` the finished cells' rounds.jsonl and the study's rounds.csv are
    deleted, with ``remove_csv`` the rounds.csv only (derived from the records: what the runner
    wrote before it wrote rounds.parquet). ``known``: cell -> records the caller has read already
    (the runner's reports), not read again."""
    # a cell's own rounds.jsonl first, the packed file otherwise (read_rounds)
    study = Path(study)
    cells = sorted(d for d in (study / "cells").iterdir() if d.is_dir()) if (study / "cells").is_dir() else []
    runs = []
    for d in cells:
        if not (d / "config.json").is_file():
            continue
        if not (d / "rounds.jsonl").is_file() and packed_records(d) is None:
            continue
        records = known[d.name] if known and d.name in known else read_rounds(d)
        if records:  # a cell that has just started (no record yet) has nothing to pack
            runs.append((d.name, read_run_json(d / "config.json"), records))
    if not runs:
        raise ValueError(f"{study}: no cell with records under {study / 'cells'} (not a study)")
    write_packed(study / PACKED, runs)
    back = read_packed(study / PACKED)
    for cell, cfg, recs in runs:
        got_cfg, got = back[cell]
        if not (same_json(got_cfg, cfg) and same_json(got, recs)):
            raise RuntimeError(f"{study / PACKED}: cell {cell} does not read back as written; nothing removed")
    if remove:  # a finished cell's records only: an unfinished one may still be written to
        for cell, _, _ in runs:
            if (study / "cells" / cell / "summary.json").is_file():
                (study / "cells" / cell / "rounds.jsonl").unlink(missing_ok=True)
    if remove or remove_csv:
        (study / "rounds.csv").unlink(missing_ok=True)
    return len(runs), sum(len(r) for _, _, r in runs)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m zofl.study", description=__doc__.split("\n\n")[0])
    ap.add_argument("study", nargs="+", type=Path, help="a zofl compare results folder (holds cells/)")
    ap.add_argument("--remove", action="store_true",
                    help="after checking the packed file, delete the cells' rounds.jsonl and the study's rounds.csv")
    ap.add_argument("--remove-csv", action="store_true",
                    help="after checking the packed file, delete the study's rounds.csv only")
    args = ap.parse_args(argv)
    for s in args.study:
        before = sum(f.stat().st_size for f in s.rglob("*") if f.is_file() and f.name in ("rounds.jsonl", "rounds.csv"))
        try:
            n, k = pack(s, args.remove, args.remove_csv)
        except ValueError as exc:  # a cell's file that is not a run's, named (one line, as zofl's other commands)
            ap.exit(2, f"{ap.prog}: error: {' '.join(str(exc).split())}\n")
        print(f"{s / PACKED}: {n} cells, {k} records, {(s / PACKED).stat().st_size / 1e6:.1f} MB "
              f"(rounds.jsonl + rounds.csv: {before / 1e6:.1f} MB{', removed' if args.remove else ''})")


if __name__ == "__main__":
    main()
