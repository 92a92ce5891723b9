"""Copy into NEW the finished cells of GRID that an earlier results folder OLD already holds.

    python experiments/copy_cells.py GRID.toml OLD_DIR NEW_DIR

A cell's folder name is a hash of its run-config (zofl.compare.cell_id), so a grid that repeats some
of another grid's cells (e.g. one widened past its edge) can start from them: the runner then runs
only the cells NEW lacks. A cell of a packed OLD (its records in OLD/rounds.parquet, zofl.packed)
is copied with its records written back out as rounds.jsonl. Prints how many were copied and how many are left to run.
"""
from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

from zofl.compare import cell_id, expand_grid
from zofl.packed import packed_records


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    grid, old, new = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    cells = expand_grid(tomllib.loads(grid.read_text()))
    copied = 0
    for cell in cells:
        src, dst = old / "cells" / cell_id(cell), new / "cells" / cell_id(cell)
        if (src / "summary.json").exists() and not dst.exists():
            shutil.copytree(src, dst)
            packed = None if (dst / "rounds.jsonl").exists() else packed_records(src)
            if packed is not None:  # a packed study's cell: its records from OLD/rounds.parquet
                (dst / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in packed))
            copied += 1
    print(f"copied {copied} finished cells from {old}; {len(cells)} in {grid}, "
          f"{sum(not (new / 'cells' / cell_id(c) / 'summary.json').exists() for c in cells)} left to run")


if __name__ == "__main__":
    main()
