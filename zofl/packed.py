"""A study's per-round records in one compressed columnar file: STUDY/rounds.parquet.

A study (a ``zofl compare`` results folder) holds one run folder per cell, STUDY/cells/<id>/, with
config.json, data.json, summary.json and rounds.jsonl (one JSON record per round). The records are
most of a study's bytes (a 400-cell study: ~40 MB of JSON lines), so a published study keeps them
in one file, STUDY/rounds.parquet: a row per record, the column ``cell`` (the run folder's name),
the record's fields, and the run's config.json keys beside them (constant within a cell, so they
cost next to nothing once compressed; a key that is also a record field, as AFBO's ``tau``, in the
column ``config.<key>``). The small files of each cell (config.json, data.json,
summary.json) stay where they are: the runner finds finished cells by them.

Why Parquet: a data scientist opens it in one line (``pandas.read_parquet("rounds.parquet")``, or
polars, DuckDB, R's arrow), its columns are typed (a float stays a float), it compresses a column of
repeated settings to almost nothing, and pyarrow, which writes it, is already installed with
flwr-datasets. zstd with byte-stream-split floats: measured on the committed studies, 723 MB of
JSON lines and CSV became 31 MB.

Exactness: ``read_packed`` gives back each record as ``json.loads`` gave it, key for key: a field a
record lacks stays absent (not null: the column ``_absent`` lists such fields), an int stays an int
beside floats of the same column (a column of mixed numbers keeps a sidecar ``<col>._int``), and a
field whose values are not all of one Arrow type (lists of several kinds, objects) is stored as
JSON text (listed in the file's metadata). ``pack`` checks every record read back against its
source before it removes anything (``--remove``).

``python -m zofl.study STUDY [STUDY ...] [--remove | --remove-csv]`` packs studies (``zofl.study.pack``).
``zofl.results.read_rounds`` reads a packed cell as if its rounds.jsonl were there, so ``zofl
compare``, ``zofl plot`` and the report scripts work on packed studies alike.

``write_table`` / ``read_table``: a report script's long-format table of records (a row per record of
several runs, e.g. the AFBO studies' rounds.parquet, written by experiments/afbo_plot.py --records) in the
same format, for studies whose run folders are not kept.
"""
from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKED = "rounds.parquet"
META_KEY = b"zofl"  # schema metadata: which columns are records, configs, JSON text
ABSENT = "_absent"
INT_SUFFIX = "._int"


def _pa():
    import pyarrow as pa
    import pyarrow.parquet as pq
    return pa, pq


def same_json(a: Any, b: Any) -> bool:
    """Equal and of the same JSON kind (1 is not 1.0, True is not 1); NaN equals NaN; an object's keys
    in any order (the packed columns keep one order for the whole study)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return a == b


def _column(pa, values: list[Any]):
    """(arrow array, int sidecar or None, stored as JSON text?) for one column's values (None = absent
    or null; the caller keeps which)."""
    present = [v for v in values if v is not None]
    if all(type(v) in (int, float) for v in present) and any(type(v) is int for v in present) \
            and any(type(v) is float for v in present):
        arr = pa.array([None if v is None else float(v) for v in values], type=pa.float64())
        return arr, pa.array([None if v is None else type(v) is int for v in values], type=pa.bool_()), False
    try:
        arr = pa.array(values)
        if all(same_json(a, b) for a, b in zip(arr.to_pylist(), values)) and not pa.types.is_null(arr.type):
            return arr, None, False
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    if not present:
        return pa.nulls(len(values), pa.string()), None, False
    return pa.array([None if v is None else json.dumps(v) for v in values], type=pa.string()), None, True


def write_packed(path: Path, runs: list[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> None:
    """Write (cell, config, records) triples to ``path`` (atomically: a reader never sees half a file)."""
    pa, _ = _pa()
    rec_keys: dict[str, None] = {}
    cfg_keys: dict[str, None] = {}
    for _, cfg, recs in runs:
        cfg_keys.update(dict.fromkeys(cfg))
        for r in recs:
            rec_keys.update(dict.fromkeys(r))
    clash = set(rec_keys) & {"cell", ABSENT}
    if clash:
        raise ValueError(f"record fields {sorted(clash)} clash with packed columns")
    cfg_column = _config_columns(cfg_keys, rec_keys)
    rows_cell, rows_absent, cols_rec, cols_cfg = [], [], {k: [] for k in rec_keys}, {k: [] for k in cfg_keys}
    for cell, cfg, recs in runs:
        for r in recs:
            rows_cell.append(cell)
            rows_absent.append([k for k in rec_keys if k not in r])
            for k in rec_keys:
                cols_rec[k].append(r.get(k))
            for k in cfg_keys:
                cols_cfg[k].append(cfg.get(k))
    names, arrays, json_cols = ["cell"], [pa.array(rows_cell, type=pa.string())], []
    float_cols = []
    for group, column in ((cols_rec, {}), (cols_cfg, cfg_column)):
        for key, vals in group.items():
            arr, ints, as_json = _column(pa, vals)
            k = column.get(key, key)
            names.append(k)
            arrays.append(arr)
            if pa.types.is_floating(arr.type):
                float_cols.append(k)
            if ints is not None:
                names.append(k + INT_SUFFIX)
                arrays.append(ints)
            if as_json:
                json_cols.append(k)
    names.append(ABSENT)
    arrays.append(pa.array(rows_absent, type=pa.list_(pa.string())))
    meta = {"records": list(rec_keys), "config": list(cfg_keys), "config_columns": cfg_column, "json": json_cols,
            "config_absent": {cell: [k for k in cfg_keys if k not in cfg] for cell, cfg, _ in runs
                              if any(k not in cfg for k in cfg_keys)}}
    _write(pa.Table.from_arrays(arrays, names=names).replace_schema_metadata({META_KEY: json.dumps(meta)}), path,
           float_cols)


def _config_columns(cfg_keys, rec_keys) -> dict[str, str]:
    """The column of each config key that is also a record field (AFBO's records have ``tau``, its outer delays,
    and every config has the run-config key ``tau``): ``config.<key>``, made unique; other keys are their own
    column."""
    taken = set(rec_keys) | set(cfg_keys) | {"cell", ABSENT}
    out = {}
    for k in cfg_keys:
        if k in rec_keys:
            name = f"config.{k}"
            while name in taken:
                name = f"config.{name}"
            taken.add(name)
            out[k] = name
    return out


def _write(table, path: Path, float_cols: list[str]) -> None:
    """``table`` to ``path`` atomically: zstd, byte-stream-split floats, dictionaries for the other columns
    (what makes a column of repeated settings cost next to nothing)."""
    _, pq = _pa()
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=9, use_byte_stream_split=float_cols or False,
                   use_dictionary=[n for n in table.column_names if n not in float_cols])
    os.replace(tmp, path)


@lru_cache(maxsize=4)
def _load(path: str, stamp: tuple[int, int]) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    pa, pq = _pa()
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[META_KEY])
    cols = {n: table.column(n).to_pylist() for n in table.column_names}
    json_cols = set(meta["json"])
    cfg_column = meta.get("config_columns", {})  # files packed before there was none: every key its own column

    def value(k: str, i: int) -> Any:
        v = cols[k][i]
        if v is None:
            return None
        if k in json_cols:
            return json.loads(v)
        if k + INT_SUFFIX in cols and cols[k + INT_SUFFIX][i]:
            return int(v)
        return v

    out: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for i, cell in enumerate(cols["cell"]):
        if cell not in out:
            gone = set(meta["config_absent"].get(cell, []))
            out[cell] = ({k: value(cfg_column.get(k, k), i) for k in meta["config"] if k not in gone}, [])
        absent = set(cols[ABSENT][i])
        out[cell][1].append({k: value(k, i) for k in meta["records"] if k not in absent})
    return out


def read_packed(path: str | os.PathLike) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """cell -> (its config, its records) from a packed file (cached while the file is unchanged)."""
    st = os.stat(path)
    try:
        return _load(str(Path(path).resolve()), (st.st_mtime_ns, st.st_size))
    except Exception as exc:  # not Parquet, or not a study's (no metadata, other columns): name the file
        raise ValueError(f"{path}: not a study's packed records ({type(exc).__name__}: {exc})") from None


def packed_records(run_dir: str | os.PathLike) -> list[dict[str, Any]] | None:
    """A packed cell's records (run_dir = STUDY/cells/<id>), or None if its study packs no such cell."""
    run_dir = Path(run_dir)
    path = run_dir.parent.parent / PACKED
    if run_dir.parent.name != "cells" or not path.is_file():
        return None
    hit = read_packed(path).get(run_dir.name)
    return None if hit is None else [dict(r) for r in hit[1]]


def write_table(path: str | os.PathLike, columns: list[str], rows: list[list[Any]]) -> Path:
    """A long-format table (a row per record: a report script's per-round records of several runs) as
    Parquet, written like a study's file (zstd, byte-stream-split floats) and atomically; a column's type
    is that of its values (str, int or float; None is missing). The same rows give the same bytes.
    ``pandas.read_parquet(path)`` opens it; ``read_table`` gives the rows back as dicts."""
    pa, _ = _pa()
    path = Path(path)
    arrays = [pa.array([row[i] for row in rows]) for i in range(len(columns))]
    _write(pa.Table.from_arrays(arrays, names=list(columns)), path,
           [c for c, a in zip(columns, arrays) if pa.types.is_floating(a.type)])
    return path


def read_table(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``write_table`` file, in order, as {column: value} (None where missing)."""
    _, pq = _pa()
    return pq.read_table(path).to_pylist()
