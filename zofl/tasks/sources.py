"""Data that stays where it lives (issue 48): reading one party's local data from a path, bounded and checked, and
partitioning one dataset over simulated clients with flwr-datasets' partitioners, as pure functions.

Reading (``read_local``): every byte a user hands over is bounded and checked before it is used, as everywhere in
zofl (zofl.safeio): only regular files (never waiting on a FIFO), at most ``LOCAL_DATA_CAP`` bytes, a folder searched
at most ``SEARCH_DEPTH`` levels deep without following links to folders, a loader's arrays measured like a file's.
Formats:

* ``.npz``: arrays ``x`` and ``y`` (keys configurable), or Keras-style ``x_train, y_train, x_test, y_test``
  (train and test returned apart); read by ``zofl.tasks.data.read_npz``, which checks every .npy header first;
* ``.parquet`` / ``.csv``: one row per example, a label column (default ``label``), feature columns (default: every
  other numeric column but the id column); a column of equal-length lists (an embedding, an image's pixels) is
  flattened;
* a folder written by Hugging Face ``datasets``' ``save_to_disk`` (a Dataset, or a DatasetDict whose ``train`` and
  ``test`` splits are used), columns chosen as for a table; arrays (``Array2D``/``Array3D``, lists) are flattened,
  encoded images are refused;
* ``module:function``: a loader of the user's (on ``sys.path``) returning ``(x, y)`` or ``(x, y, x_test, y_test)``.

The arrays are checked (numeric and finite features, 2-D after flattening, not empty, integer labels in
[0, num_classes), the declared number of features) and returned as a frozen ``LocalData``; every refusal is a one-line
``DataFileError`` naming the file (or loader) and the rule. A client's data may hold a single class (a pathological
split gives it one or two), so that is not refused here, unlike a whole dataset's training part.

Partitioning (``partition``): labels (and client ids) of one dataset -> one array of row positions per client, by
``iid``, ``dirichlet`` (the same indices as ``zofl.tasks.data.dirichlet_partition``), ``pathological``, ``shards``,
``natural`` (one client per distinct id) or ``grouped-natural``; the same inputs give the same output. Impossible
requests are a one-line ``SplitError``.

Nothing here imports Flower or zofl's Flower adapters: flwr-datasets, ``datasets`` and pyarrow only, lazily.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import math
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..safeio import JSON_CAP, FileRefused, GiB, check_size, open_regular, read_json, read_user_bytes
from ..settings import PARTITIONERS, SPLIT_FALLBACKS
from ..streams import TEST_SPLIT
from .data import (
    KERAS_KEYS,
    TEST_FRACTION,
    DataError,
    DataFileError,
    SplitError,
    Splits,
    _one_line,
    array_fingerprint,
    check_arrays,
    cut_rows,
    dirichlet_partition,
    partition_positions,
    read_npz,
)

# A party's data is read whole into memory (and copied once more as float32 rows), so the cap is what one process
# can hold beside its model: 4 GiB is CIFAR-10's 60,000 images 22 times over, or 50 million rows of 20 float32
# features. Larger data needs a module:function loader of its own (which may sample or stream), whose arrays count
# against the same cap.
LOCAL_DATA_CAP = 4 * GiB
SEARCH_DEPTH = 3  # folders below a given folder searched for a save_to_disk dataset (a DatasetDict is one deep)
MAX_ENTRIES = 10_000  # files and folders looked at in that search: a save_to_disk folder holds a few dozen
FORMATS = ("npz", "parquet", "csv", "hf", "loader")
SUFFIXES = {".npz": "npz", ".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
_LOADER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
# part names handed to check_arrays: none ends in "train", which check_arrays refuses when it holds a single class
_PART, _TEST_PART = "examples", "test examples"


@dataclass(frozen=True)
class LocalData:
    """One party's examples as read and checked: features as contiguous float32 rows (images flattened, values as
    stored: no scaling), int64 labels, a separate test part or None, the id column's values per training example
    (integers or strings) or None; ``fingerprint`` is ``array_fingerprint`` of the arrays as read (before any
    conversion), ``source`` says where they came from. The arrays are read-only."""

    x: np.ndarray  # (N, d) float32
    y: np.ndarray  # (N,) int64
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    ids: np.ndarray | None  # (N,) int64 or str
    num_classes: int  # as declared, else the largest label + 1
    fingerprint: str
    source: str

    @property
    def num_features(self) -> int:
        return self.x.shape[1]


def _refused(exc: FileRefused) -> DataFileError:
    return DataFileError(str(exc))


def _column_list(columns: str | Sequence[str] | None) -> list[str] | None:
    """Feature columns as given: None (every numeric column), a comma list "a, b" or a sequence of names."""
    if columns is None:
        return None
    names = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else [str(c) for c in columns]
    if not names or any(not c for c in names):
        raise DataError(f"feature columns must be a comma list of column names, got {columns!r}")
    return names


def detect_format(source: str | os.PathLike) -> str:
    """The format of ``source`` (one of ``FORMATS``): a folder is a save_to_disk dataset, a file goes by its suffix,
    ``module:function`` that names no file is a loader; a DataFileError naming it otherwise."""
    text = os.fspath(source)
    path = Path(text)
    if path.is_dir():
        return "hf"
    if not os.path.lexists(path):
        if _LOADER.fullmatch(text):
            return "loader"
        raise DataFileError(f"{text}: no such file or folder (nor a module:function loader)")
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DataFileError(f"{text}: unknown data format (suffix {path.suffix!r}); zofl reads .npz, .parquet, .csv, "
                            f"a folder written by datasets' save_to_disk, or a module:function loader")
    return fmt


def read_local(source: str | os.PathLike, *, fmt: str = "auto", x_key: str = "x", y_key: str = "y",
               label_column: str = "label", feature_columns: str | Sequence[str] | None = None,
               id_column: str | None = None, num_classes: int | None = None, num_features: int | None = None,
               cap: int | None = None) -> LocalData:
    """Read and check one party's data from ``source`` (a path, or ``module:function``); see the module docstring.

    ``fmt``: ``auto`` (``detect_format``) or one of ``FORMATS``. ``x_key``/``y_key``: a .npz's arrays (its Keras-style
    layout is recognised by its keys). ``label_column``, ``feature_columns`` (None: every other numeric column),
    ``id_column`` (the client-id column, never a feature; for a .npz an array key): tables and datasets folders.
    ``num_classes``/``num_features``: what the task declares, checked when given. ``cap``: bytes read at most
    (None: ``LOCAL_DATA_CAP``, looked up at the call)."""
    cap = LOCAL_DATA_CAP if cap is None else cap
    fmt = detect_format(source) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise DataError(f"data format must be 'auto' or one of {FORMATS}, got {fmt!r}")
    columns = _column_list(feature_columns)
    where = os.fspath(source)
    if fmt == "npz":
        parts, ids, desc = _read_npz_parts(Path(where), x_key, y_key, id_column, cap)
    elif fmt in ("parquet", "csv"):
        table = (_parquet_table if fmt == "parquet" else _csv_table)(Path(where), cap, label_column, columns,
                                                                    id_column)
        parts, ids = _table_parts(where, {"train": table}, label_column, columns, id_column)
        desc = f"{fmt} file {Path(where).resolve()}"
    elif fmt == "hf":
        tables, desc = _hf_tables(Path(where), cap)
        parts, ids = _table_parts(where, tables, label_column, columns, id_column)
    else:
        parts, desc = _loader_parts(where, cap)
        ids = None
    return _local_data(where, desc, parts, ids, num_classes, num_features)


# -- checks and the result ---------------------------------------------------------------------------------------

def _check_parts(where: str, parts: dict[str, tuple[np.ndarray, np.ndarray]], num_classes: int | None,
                 num_features: int | None) -> int:
    """Refuse (DataFileError naming ``where``) parts that are not numeric, finite, 2-D after flattening, non-empty
    feature rows with one integer label in [0, num_classes) each, of ``num_features`` features when declared;
    the number of classes (declared, else the largest label + 1)."""
    for name, (x, y) in parts.items():
        if x.ndim < 2:
            raise DataFileError(f"{where}: features of {name!r} must hold one row per example (2-D or more), got "
                                f"shape {x.shape}")
        if y.ndim == 0:
            raise DataFileError(f"{where}: labels of {name!r} must be one per example, got a single value")
        if len(x) == 0 or len(y) == 0:
            raise DataFileError(f"{where}: {name!r} is empty (features {x.shape}, labels {y.shape}); "
                                f"at least one example is needed")
        if np.issubdtype(x.dtype, np.complexfloating):
            raise DataFileError(f"{where}: features of {name!r} must be real numbers, got dtype {x.dtype}")
    if num_classes is None:
        num_classes = max((int(y.max()) + 1 for _, y in parts.values() if np.issubdtype(y.dtype, np.integer)),
                          default=1)
    elif num_classes < 1:
        raise DataError(f"num_classes must be at least 1, got {num_classes}")
    check_arrays(Path(where), parts, num_classes)  # dtypes, one-hot labels, lengths, label range, NaN/inf, shapes
    width = math.prod(next(iter(parts.values()))[0].shape[1:])
    if width == 0:
        raise DataFileError(f"{where}: examples have no features (shape {next(iter(parts.values()))[0].shape})")
    if num_features is not None and width != num_features:
        shape = next(iter(parts.values()))[0].shape[1:]
        flat = f" ({' x '.join(map(str, shape))} flattened)" if len(shape) > 1 else ""
        raise DataFileError(f"{where}: {width} features per example{flat}, but the task declares "
                            f"num_features={num_features}")
    return num_classes


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _rows(x: np.ndarray) -> np.ndarray:
    return _frozen(np.ascontiguousarray(x.reshape(len(x), -1), dtype=np.float32))


def _labels(y: np.ndarray) -> np.ndarray:
    return _frozen(np.ascontiguousarray(y.reshape(len(y), -1)[:, 0], dtype=np.int64))


def _id_values(where: str, ids: np.ndarray, n: int) -> np.ndarray:
    """Client ids as int64 or fixed-width strings (both fingerprinted by their bytes): one per example."""
    if ids.ndim != 1 or len(ids) != n:
        raise DataFileError(f"{where}: client ids must be one value per example ({n}), got shape {ids.shape}")
    if np.issubdtype(ids.dtype, np.integer):
        return _frozen(ids.astype(np.int64))
    if ids.dtype.kind in "UO" and all(isinstance(v, str) for v in ids.tolist()):
        return _frozen(ids.astype(str))
    raise DataFileError(f"{where}: client ids must be integers or strings, got dtype {ids.dtype}")


def _local_data(where: str, desc: str, parts: dict[str, tuple[np.ndarray, np.ndarray]], ids: np.ndarray | None,
                num_classes: int | None, num_features: int | None) -> LocalData:
    """Check ``parts`` ({_PART: (x, y)} and maybe {_TEST_PART: ...}) and build the LocalData."""
    classes = _check_parts(where, parts, num_classes, num_features)
    x, y = parts[_PART]
    ids = None if ids is None else _id_values(where, ids, len(x))
    raw = [a for xy in parts.values() for a in xy] + ([] if ids is None else [ids])
    test = parts.get(_TEST_PART)
    return LocalData(_rows(x), _labels(y), None if test is None else _rows(test[0]),
                     None if test is None else _labels(test[1]), ids, classes, array_fingerprint(*raw), desc)


def split_test(data: LocalData, test_fraction: float = TEST_FRACTION, seed: int = 0) -> LocalData:
    """``data`` with a test part: unchanged when it has one, else ``test_fraction`` of its examples (rounded, at least
    one, leaving at least one) drawn by ``seed`` as the test part, both parts in file order (the ids follow the
    training rows). A pure function of (data, test_fraction, seed); the fingerprint stays that of the data as read."""
    if data.x_test is not None:
        return data
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    n = len(data.y)
    n_test = int(round(test_fraction * n))
    if not 1 <= n_test <= n - 1:
        raise DataFileError(f"{data.source}: {n} examples cannot be split by test_fraction={test_fraction} "
                            f"({n_test} test examples); at least one is needed on each side")
    order = np.random.default_rng(np.random.SeedSequence([seed, TEST_SPLIT])).permutation(n)
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    return dataclasses.replace(
        data, x=_frozen(data.x[train]), y=_frozen(data.y[train]), x_test=_frozen(data.x[test]),
        y_test=_frozen(data.y[test]), ids=None if data.ids is None else _frozen(data.ids[train]))


# -- .npz --------------------------------------------------------------------------------------------------------

def _npz_names(path: Path) -> set[str]:
    """The array names of the .npz ``path`` (its zip members less ``.npy``), opened as a regular file only; empty
    when it is no zip archive (then read_npz says what it is)."""
    import zipfile

    try:
        with os.fdopen(open_regular(path, "local data file"), "rb") as f, zipfile.ZipFile(f) as z:
            return {n[:-4] if n.endswith(".npy") else n for n in z.namelist()}
    except (OSError, zipfile.BadZipFile, ValueError):
        return set()


def _read_npz_parts(path: Path, x_key: str, y_key: str, id_key: str | None,
                    cap: int) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray | None, str]:
    """The parts of a .npz: its size checked against ``cap`` first, then its arrays read by read_npz (exactly the
    layout's keys, every .npy header checked against its zip member before numpy allocates)."""
    try:
        fd = open_regular(path, "local data file")
        try:
            check_size(fd, path, cap, "local data file")
        finally:
            os.close(fd)
    except FileRefused as exc:
        raise _refused(exc) from None
    except OSError as exc:
        raise DataFileError(f"{path}: cannot be read ({_one_line(exc, typed=True)})") from None
    keras = set(KERAS_KEYS) <= _npz_names(path)
    keys = KERAS_KEYS if keras else (x_key, y_key)
    arrays = read_npz(path, keys + ((id_key,) if id_key else ()))
    if keras:
        parts = {_PART: (arrays["x_train"], arrays["y_train"]), _TEST_PART: (arrays["x_test"], arrays["y_test"])}
    else:
        parts = {_PART: (arrays[x_key], arrays[y_key])}
    layout = "x_train, y_train, x_test, y_test" if keras else f"{x_key}, {y_key}"
    return parts, arrays[id_key] if id_key else None, f"npz file {path.resolve()} ({layout})"


# -- tables: Parquet, CSV, save_to_disk folders -------------------------------------------------------------------

def _text_leaf(t: Any) -> bool:
    """Whether arrow type ``t`` is a string or binary column (not nested): one pyarrow can read dictionary-encoded."""
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
        or pa.types.is_large_binary(t)


def _numeric_leaf(t: Any) -> bool:
    """Whether arrow type ``t`` is numbers, or (nested) lists of numbers: a feature column zofl can flatten."""
    import pyarrow as pa

    while True:
        if isinstance(t, pa.ExtensionType):  # datasets' Array2D..Array5D: lists underneath
            t = t.storage_type
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            t = t.value_type
        else:
            return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _pick_columns(where: str, schema: Any, label: str, features: list[str] | None, id_column: str | None) -> list[str]:
    """The feature columns of a table with arrow ``schema``: ``features`` as given (each must exist), else every
    column of numbers or lists of numbers but the label and id columns; the label (and id) column must exist."""
    names = list(schema.names)
    for role, col in (("label", label), ("client-id", id_column)):
        if col is not None and col not in names:
            raise DataFileError(f"{where}: no {role} column {col!r}; its columns are {names}")
    if features is not None:
        missing = [c for c in features if c not in names]
        if missing:
            raise DataFileError(f"{where}: no feature column(s) {missing}; its columns are {names}")
        clash = [c for c in features if c in (label, id_column)]
        if clash:
            raise DataFileError(f"{where}: column(s) {clash} named as features and as the label or client id")
        return features
    picked = [c for c in names if c not in (label, id_column) and _numeric_leaf(schema.field(c).type)]
    if not picked:
        others = {c: str(schema.field(c).type) for c in names if c not in (label, id_column)}
        raise DataFileError(f"{where}: no numeric feature columns besides {label!r}; the others are {others}")
    return picked


# bytes per value once decoded, by Parquet physical type; a BYTE_ARRAY (string) column is read dictionary-encoded:
# 4 bytes of index per value beside its stored bytes, whatever its run-length encoding or compression saved
_DECODED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 4}


def _decoded_bytes(pf: Any, wanted: set[str]) -> int:
    """What the columns ``wanted`` of the ParquetFile ``pf`` take decoded, from its metadata alone: per column
    chunk, its values times their width (``_DECODED_WIDTH``; a fixed-length byte array its length) plus its
    uncompressed stored bytes (dictionaries, strings) and, in a list column, 4 bytes of offsets per row. Compression and
    run-length encoding make a few KiB of zeros stand for GiBs: this counts what they stand for."""
    md, total = pf.metadata, 0
    for r in range(md.num_row_groups):
        rg = md.row_group(r)
        for i in range(rg.num_columns):
            cc = rg.column(i)
            if cc.path_in_schema.split(".")[0] not in wanted:
                continue
            width = _DECODED_WIDTH.get(cc.physical_type) or max(1, md.schema.column(i).length or 1)
            offsets = 4 * rg.num_rows if "." in cc.path_in_schema else 0  # a list column's leaf: emb.list.element
            total += cc.num_values * width + cc.total_uncompressed_size + offsets
    return total


def _read_bytes(path: Path, cap: int) -> bytes:
    """The bytes of a local data file (Parquet, CSV): a regular file, at most ``cap`` of them (safeio); a
    DataFileError naming it otherwise."""
    try:
        return read_user_bytes(path, cap, "local data file")
    except FileRefused as exc:
        raise _refused(exc) from None
    except OSError as exc:
        raise DataFileError(f"{path}: cannot be read ({_one_line(exc, typed=True)})") from None


def _parquet_table(path: Path, cap: int, label: str, features: list[str] | None, id_column: str | None) -> Any:
    """The needed columns of a Parquet file: at most ``cap`` bytes read (safeio), what they take decoded at most
    ``cap`` too (``_decoded_bytes``: a small file may unpack to far more), then decoded from memory, strings kept
    dictionary-encoded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = _read_bytes(path, cap)
    try:
        schema = pq.ParquetFile(pa.BufferReader(raw)).schema_arrow
        columns = _pick_columns(str(path), schema, label, features, id_column)
        wanted = set(columns) | {label} | ({id_column} if id_column else set())
        # pyarrow dictionary-encodes only leaf columns (a nested one is a KeyError): strings and bytes, the rest
        # read as stored and refused by what reads them (_matrix, _id_values) when it is no numbers or ids
        strings = [c for c in wanted if _text_leaf(schema.field(c).type)]
        pf = pq.ParquetFile(pa.BufferReader(raw), read_dictionary=strings)
        need = _decoded_bytes(pf, wanted)
        if need > cap:
            raise DataFileError(f"{path}: its columns take {need:,} bytes decoded (Parquet metadata), more than the "
                                f"cap of {cap:,} bytes for local data")
        return pf.read(columns=[c for c in schema.names if c in wanted])
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataFileError(f"{path}: cannot be read as a Parquet file ({_one_line(exc, typed=True)})") from None


def _csv_table(path: Path, cap: int, label: str, features: list[str] | None, id_column: str | None) -> Any:
    """A CSV file (a header row, then one row per example) as an arrow table: at most ``cap`` bytes read (safeio),
    parsed from memory by pyarrow (types inferred per column)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    raw = _read_bytes(path, cap)
    try:
        table = pacsv.read_csv(pa.BufferReader(raw))
    except (pa.ArrowException, ValueError) as exc:
        raise DataFileError(f"{path}: cannot be read as a CSV file with a header row "
                            f"({_one_line(exc, typed=True)})") from None
    _pick_columns(str(path), table.schema, label, features, id_column)
    return table


def _matrix(where: str, table: Any, name: str) -> np.ndarray:
    """Column ``name`` of an arrow ``table`` as an (N, k) numpy array: numbers as they are (k = 1), equal-length
    (nested) lists flattened; a column with missing values, ragged lists or anything but numbers is refused."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n, width = len(arr), 1
    while True:
        if isinstance(arr.type, pa.ExtensionType):
            arr = arr.storage
        if arr.null_count:
            raise DataFileError(f"{where}: column {name!r} has {arr.null_count} missing (null) values")
        t = arr.type
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
            k = int(lengths[0]) if len(lengths) else 0
            if len(lengths) and (lengths.min() != k or lengths.max() != k):
                raise DataFileError(f"{where}: column {name!r} holds lists of {int(lengths.min())} to "
                                    f"{int(lengths.max())} values; every example needs the same number")
        else:
            break
        arr, width = arr.flatten(), width * k
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        t = t.value_type if pa.types.is_dictionary(t) else t
        raise DataFileError(f"{where}: column {name!r} is {t}, not numbers (nor lists of numbers)")
    return arr.to_numpy(zero_copy_only=False).reshape(n, width)


ID_MAX_CHARS = 256  # a client id: a name, a number, a UUID (36) or a SHA-256 in hex (64); never a document


def _id_column(where: str, table: Any, name: str) -> np.ndarray:
    """The client-id column as int64 or fixed-width strings: integers or strings of at most ``ID_MAX_CHARS``
    characters (one long string would widen every row's), none missing; a dictionary-encoded column decoded
    through its dictionary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    if arr.null_count:
        raise DataFileError(f"{where}: client-id column {name!r} has {arr.null_count} missing (null) values")
    if pa.types.is_integer(t) and not pa.types.is_dictionary(arr.type):
        return arr.to_numpy(zero_copy_only=False).astype(np.int64)
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise DataFileError(f"{where}: client-id column {name!r} is {t}; client ids must be integers or strings")
    values = arr.dictionary if pa.types.is_dictionary(arr.type) else arr
    longest = pc.max(pc.utf8_length(values)).as_py() or 0
    if longest > ID_MAX_CHARS:
        raise DataFileError(f"{where}: client-id column {name!r} holds an id of {longest:,} characters; ids are at "
                            f"most {ID_MAX_CHARS}")
    if pa.types.is_dictionary(arr.type):
        return np.asarray(values.to_pylist(), dtype=str)[arr.indices.to_numpy(zero_copy_only=False)]
    return np.asarray(values.to_pylist(), dtype=str)


def _table_parts(where: str, tables: dict[str, Any], label: str, features: list[str] | None,
                 id_column: str | None) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
    """(x, y) of the ``train`` table (and ``test`` if given) from their columns, and the train table's ids."""
    parts, ids = {}, None
    for split, part in (("train", _PART), ("test", _TEST_PART)):
        if split not in tables:
            continue
        table = tables[split]
        here = where if split == "train" else f"{where} (split 'test')"
        columns = _pick_columns(here, table.schema, label, features, id_column)
        x = np.hstack([_matrix(here, table, c) for c in columns])
        y = _matrix(here, table, label)
        parts[part] = (x, y[:, 0] if y.shape[1] == 1 else y)  # several values per row: check_arrays names one-hot
        if split == "train" and id_column:
            ids = _id_column(here, table, id_column)
    return parts, ids


def _find_saved(root: Path) -> Path:
    """The folder written by ``save_to_disk`` at or below ``root``: the shallowest one at most ``SEARCH_DEPTH`` below
    holding dataset_dict.json or state.json; links to folders not followed, at most ``MAX_ENTRIES`` looked at, two
    at the same depth refused as ambiguous."""
    seen, found = 0, []
    for folder, dirs, files in os.walk(root):  # os.walk does not follow links to folders
        depth = len(Path(folder).relative_to(root).parts)
        seen += len(dirs) + len(files)
        if seen > MAX_ENTRIES:
            raise DataFileError(f"{root}: more than {MAX_ENTRIES:,} files and folders searched for a dataset saved "
                                f"by datasets' save_to_disk; name its folder")
        if "dataset_dict.json" in files or "state.json" in files:
            found.append((depth, Path(folder)))
            dirs.clear()
        if depth >= SEARCH_DEPTH:
            dirs.clear()
        dirs.sort()
    if not found:
        raise DataFileError(f"{root}: no dataset saved by datasets' save_to_disk (dataset_dict.json or state.json) in "
                            f"it or up to {SEARCH_DEPTH} folders below")
    top = min(d for d, _ in found)
    shallowest = sorted(str(p) for d, p in found if d == top)
    if len(shallowest) > 1:
        raise DataFileError(f"{root}: several datasets saved by save_to_disk: {shallowest}; name one")
    return Path(shallowest[0])


def _plain_name(where: Path, what: str, name: Any) -> str:
    """A file or folder name that stays in its folder (no path separators, not . or ..)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise DataFileError(f"{where}: {what} {name!r} is not a plain name inside the folder")
    return name


def _saved_size(folder: Path) -> int:
    """Bytes of the arrow files a saved Dataset's state.json lists, by stat: each a regular file directly in
    ``folder`` (a name that leaves it, or a link to a device, is refused); its JSON files bounded (safeio)."""
    try:
        state = read_json(folder / "state.json", JSON_CAP, "datasets state.json")
        read_json(folder / "dataset_info.json", JSON_CAP, "datasets dataset_info.json")
    except FileRefused as exc:
        raise _refused(exc) from None
    except (OSError, ValueError) as exc:
        raise DataFileError(f"{folder}: not a dataset saved by save_to_disk ({_one_line(exc, typed=True)})") from None
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise DataFileError(f"{folder / 'state.json'}: no list of data files ('_data_files')")
    total = 0
    for entry in files:
        path = folder / _plain_name(folder / "state.json", "data file", entry.get("filename"))
        try:
            st = os.stat(path)
        except OSError as exc:
            raise DataFileError(f"{path}: cannot be read ({_one_line(exc, typed=True)})") from None
        if not stat.S_ISREG(st.st_mode):
            raise DataFileError(f"{path}: not a regular file; a dataset's data files must be")
        total += st.st_size
    return total


def _hf_tables(root: Path, cap: int) -> tuple[dict[str, Any], str]:
    """The ``train`` (and ``test``) arrow tables of the dataset saved by ``save_to_disk`` at or below ``root``: its
    files checked first (``_saved_size``: regular, within ``cap`` together), then ``datasets.load_from_disk``
    (memory-mapped). A DatasetDict's split ``train`` (or its only split) is the training part."""
    folder = _find_saved(root)
    total = 0
    if (folder / "dataset_dict.json").exists():
        try:
            doc = read_json(folder / "dataset_dict.json", JSON_CAP, "datasets dataset_dict.json")
        except FileRefused as exc:
            raise _refused(exc) from None
        except (OSError, ValueError) as exc:
            raise DataFileError(f"{folder / 'dataset_dict.json'}: unreadable ({_one_line(exc, typed=True)})") from None
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, list) or not splits:
            raise DataFileError(f"{folder / 'dataset_dict.json'}: no list of splits")
        for s in splits:
            sub = folder / _plain_name(folder / "dataset_dict.json", "split", s)
            if sub.is_symlink() or not sub.is_dir():
                raise DataFileError(f"{sub}: the split {s!r} is not a folder (links to folders are not followed)")
            total += _saved_size(sub)
    else:
        splits = None
        total = _saved_size(folder)
    if total > cap:
        raise DataFileError(f"{folder}: its data files hold {total:,} bytes, more than the cap of {cap:,} bytes for "
                            f"local data")
    from datasets import Dataset, load_from_disk

    try:
        loaded = load_from_disk(str(folder))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFileError(f"{folder}: cannot be loaded by datasets' load_from_disk "
                            f"({_one_line(exc, typed=True)})") from None
    if isinstance(loaded, Dataset):
        named = {"train": loaded}
    else:
        named = dict(loaded)
        if "train" not in named:
            if len(named) != 1:
                raise DataFileError(f"{folder}: splits {sorted(named)}; the training split must be named 'train'")
            named = {"train": next(iter(named.values()))}
    tables = {k: named[k].with_format("arrow")[:] for k in ("train", "test") if k in named}
    parts = "" if splits is None else f" (splits {', '.join(sorted(tables))})"
    return tables, f"datasets folder {folder.resolve()}{parts}"


# -- module:function ---------------------------------------------------------------------------------------------

def _loader_parts(spec: str, cap: int) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str]:
    """Call the user's loader ``module:function`` (imported from sys.path) and take its (x, y) or (x, y, x_test,
    y_test) numpy arrays, at most ``cap`` bytes together; anything else is a DataFileError naming the loader."""
    where = f"loader {spec!r}"
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise DataFileError(f"{where}: cannot import module {module!r} ({_one_line(exc, typed=True)})") from exc
    except AttributeError:
        raise DataFileError(f"{where}: module {module!r} has no attribute {name!r}") from None
    if not callable(fn):
        raise DataFileError(f"{where}: {module}.{name} is a {type(fn).__name__}, not a function")
    try:
        out = fn()
    except Exception as exc:  # the user's code: any failure is its source's, told in one line
        raise DataFileError(f"{where}: raised {_one_line(exc, typed=True)}") from exc
    shape = "a tuple (x, y) or (x, y, x_test, y_test) of numpy arrays"
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 4):
        what = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
        raise DataFileError(f"{where}: returned {what}; expected {shape}")
    bad = [i for i, a in enumerate(out) if not isinstance(a, np.ndarray)]
    if bad:
        raise DataFileError(f"{where}: returned a {type(out[bad[0]]).__name__} as item {bad[0]}; expected {shape}")
    size = sum(a.nbytes for a in out)
    if size > cap:
        raise DataFileError(f"{where}: returned {size:,} bytes of arrays, more than the cap of {cap:,} bytes for local "
                            f"data")
    parts = {_PART: (out[0], out[1])}
    if len(out) == 4:
        parts[_TEST_PART] = (out[2], out[3])
    return parts, f"loader {spec}"


# -- partitioning one dataset for simulation ------------------------------------------------------------------

SCHEMES = PARTITIONERS  # the run-config key 'partitioner' takes these (declared in zofl.settings)
CLASS_ASSIGNMENTS = ("random", "deterministic", "first-deterministic")  # flwr-datasets' PathologicalPartitioner's


@dataclass(frozen=True)
class PartitionParams:
    """The schemes' parameters (each scheme reads its own)."""

    alpha: float = 1.0  # dirichlet: concentration; small is skewed
    min_size: int = 10  # dirichlet: every client at least this many examples (up to 10 draws, as flwr-datasets)
    classes_per_client: int = 2  # pathological: k classes per client
    class_assignment: str = "first-deterministic"  # pathological: every class used while m >= classes
    shards_per_client: int = 2  # shards: shards of one label-sorted run each
    shard_size: int = 0  # shards: examples per shard; 0 = N // (m * shards_per_client)
    group_size: int = 2  # grouped-natural: distinct ids per client
    fallback: str = "top-up"  # dirichlet: what follows 10 failed draws (zofl.tasks.data.dirichlet_partition)


def _dataset(columns: dict[str, np.ndarray]) -> Any:
    """An in-memory Hugging Face Dataset of ``columns`` (straight from arrow: no per-value Python)."""
    import pyarrow as pa
    from datasets import Dataset

    return Dataset(pa.table({k: pa.array(v) for k, v in columns.items()}))


def _distinct(ids: np.ndarray) -> int:
    return len(np.unique(ids))


def partition(labels: np.ndarray, ids: np.ndarray | None, scheme: str, m: int,
              params: PartitionParams = PartitionParams(), seed: int = 0) -> list[np.ndarray]:
    """Row positions 0..N-1 of one dataset for each of ``m`` simulated clients, by ``scheme`` (``SCHEMES``), with
    flwr-datasets' partitioners: ``iid`` (IidPartitioner on a seeded permutation: contiguous equal shares of it),
    ``dirichlet`` (DirichletPartitioner's draw over labels: ``zofl.tasks.data.dirichlet_partition``),
    ``pathological`` (PathologicalPartitioner: k classes per client; the examples of a class no client drew are in
    none), ``shards`` (ShardPartitioner: the label-sorted rows cut into shards, each client a few; a remainder of
    fewer than m x shards_per_client rows is in none), ``natural`` (NaturalIdPartitioner: client i holds the rows of
    the i-th smallest distinct id, so m must be the number of distinct ids) and ``grouped-natural``
    (GroupedNaturalIdPartitioner: consecutive sorted distinct ids in groups of group_size, the last maybe smaller).

    ``labels``: N integer labels; ``ids``: N client ids (integers or strings), needed by the natural schemes. A pure
    function of its arguments (``seed`` drives every draw); an impossible request is a one-line SplitError."""
    from flwr_datasets import partitioner as fp

    labels = np.asarray(labels)
    if scheme not in SCHEMES:
        raise SplitError(f"partition scheme must be one of {SCHEMES}, got {scheme!r}")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise SplitError(f"labels must be one integer per example, got shape {labels.shape} of {labels.dtype}")
    n = len(labels)
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise SplitError(f"num-clients must be a positive integer, got {m!r}")
    m = int(m)
    if m > n:
        raise SplitError(f"num-clients={m} exceeds the {n} examples to partition")
    pos = np.arange(n, dtype=np.int64)
    p = params
    if scheme in ("natural", "grouped-natural"):
        if ids is None:
            raise SplitError(f"scheme {scheme!r} needs a client id per example (a client-id column); none given")
        ids = np.asarray(ids)
        if ids.dtype == object and all(isinstance(v, str) for v in ids.tolist()):
            ids = ids.astype(str)
        if ids.shape != (n,):
            raise SplitError(f"scheme {scheme!r}: {ids.shape[0] if ids.ndim else 0} client ids for {n} examples; one "
                             f"per example is needed")
        if not (np.issubdtype(ids.dtype, np.integer) or ids.dtype.kind == "U"):
            raise SplitError(f"scheme {scheme!r}: client ids must be integers or strings, got dtype {ids.dtype}")
        d = _distinct(ids)
        if scheme == "natural":
            if m != d:
                raise SplitError(f"scheme 'natural' makes one client per distinct id: the data hold {d:,} distinct "
                                 f"ids, not num-clients={m:,}")
            part = fp.NaturalIdPartitioner(partition_by="cid")
        else:
            if p.group_size < 1:
                raise SplitError(f"scheme 'grouped-natural': group_size must be at least 1, got {p.group_size}")
            groups = -(-d // p.group_size)
            if m != groups:
                raise SplitError(f"scheme 'grouped-natural' with group_size={p.group_size} makes {groups:,} clients "
                                 f"from the {d:,} distinct ids, not num-clients={m:,}")
            part = fp.GroupedNaturalIdPartitioner(partition_by="cid", group_size=int(p.group_size),
                                                  mode="allow-smaller", sort_unique_ids=True)
        part.dataset = _dataset({"pos": pos, "cid": ids})
    elif scheme == "iid":
        order = np.random.default_rng(np.random.SeedSequence([seed, 0x11D])).permutation(n)
        part = fp.IidPartitioner(num_partitions=m)
        part.dataset = _dataset({"pos": order.astype(np.int64)})
    else:
        classes = _distinct(labels)
        if scheme == "dirichlet":
            if not p.alpha > 0 or p.min_size < 0:
                raise SplitError(f"scheme 'dirichlet' needs alpha > 0 and min_size >= 0, got alpha={p.alpha}, "
                                 f"min_size={p.min_size}")
            if p.fallback not in SPLIT_FALLBACKS:
                raise SplitError(f"scheme 'dirichlet': fallback must be one of {SPLIT_FALLBACKS}, got {p.fallback!r}")
            try:
                return dirichlet_partition(labels.astype(np.int64), m, p.alpha, seed, int(p.min_size), p.fallback)
            except ValueError as exc:  # flwr-datasets' refusal (fallback 'fail'), or top_up's
                raise SplitError(f"scheme 'dirichlet' over {m} clients of {n} examples: "
                                 f"{_one_line(exc, 300, typed=True)}") from None
        elif scheme == "pathological":
            if not 1 <= p.classes_per_client <= classes:
                raise SplitError(f"scheme 'pathological': classes_per_client={p.classes_per_client} must lie in "
                                 f"1..{classes}, the number of distinct labels")
            if p.class_assignment not in CLASS_ASSIGNMENTS:
                raise SplitError(f"scheme 'pathological': class_assignment must be one of {CLASS_ASSIGNMENTS}, got "
                                 f"{p.class_assignment!r}")
            part = fp.PathologicalPartitioner(num_partitions=m, partition_by="label",
                                              num_classes_per_partition=int(p.classes_per_client),
                                              class_assignment_mode=p.class_assignment, shuffle=True, seed=seed)
        else:
            per, size = int(p.shards_per_client), int(p.shard_size)
            if per < 1 or size < 0:
                raise SplitError(f"scheme 'shards' needs shards_per_client >= 1 and shard_size >= 0, got "
                                 f"{per} and {size}")
            if (size or n // (m * per)) * m * per > n or n // (m * per) == 0:
                raise SplitError(f"scheme 'shards': {n} examples cannot make {m} x {per} shards of "
                                 f"{size or 'at least 1'} examples")
            part = fp.ShardPartitioner(num_partitions=m, partition_by="label", num_shards_per_partition=per,
                                       shard_size=size or None, keep_incomplete_shard=False, shuffle=True, seed=seed)
        part.dataset = _dataset({"label": labels.astype(np.int64), "pos": pos})
    try:
        # NaturalIdPartitioner draws a tqdm bar on stderr, the others warn about unused classes: kept quiet
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return partition_positions(part, m)
    except ValueError as exc:  # flwr-datasets' refusals: the Dirichlet draw failing 10 times, a class too rare
        raise SplitError(f"scheme {scheme!r} over {m} clients of {n} examples: "
                         f"{_one_line(exc, 300, typed=True)}") from None


# -- a run's data split over simulated clients (run-config data-path, partitioner) ------------------------------

def split_rows(labels: np.ndarray, ids: np.ndarray | None, n_test_given: int, scheme: str, m: int,
               params: PartitionParams, server_fraction: float, seed: int) -> Splits:
    """The run's split of N training rows (``labels``, client ``ids`` or None) followed by ``n_test_given`` rows of a
    test part of the data's own: that test part is the test set, else TEST_FRACTION of the rows drawn by the seed
    (the built-in datasets' protocol: ``zofl.tasks.data.make_splits``); then server-fraction of the training rows
    for the server, and the rest split over the ``m`` clients by ``scheme`` (``partition``, with the rest's labels
    and ids). A pure function of its arguments; index arrays into the N + n_test_given rows."""
    test, server, rest = cut_rows(len(labels) - n_test_given, n_test_given, server_fraction, seed)
    if len(rest) < m:
        raise SplitError(f"num-clients={m} exceeds the {len(rest)} examples left to the clients")
    if scheme == "dirichlet":  # min-partition-size at most what m clients can each have, as make_splits
        params = dataclasses.replace(params, min_size=min(params.min_size, len(rest) // m))
    parts = partition(labels[rest], None if ids is None else ids[rest], scheme, m, params, seed)
    return Splits(np.sort(test), np.sort(server), tuple(rest[p] for p in parts))
