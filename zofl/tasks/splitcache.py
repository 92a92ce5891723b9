"""A run's split made once and kept as a compact index file that every process memory-maps (run-config
``split-cache``).

The split of a dataset over m clients is a pure function of the data and the split keys
(``zofl.tasks.base.splits_of``); making it costs flwr-datasets' partitioner (about 2 s of imports, then 13 s for
10,000 Dirichlet clients), paid before by every process of a run: ``zofl run``'s check, the server, every Ray actor.
Now the first process to need it writes ``<data-dir>/splits/<name>-m<m>-<key>.npy``; the others map it
(``np.load(mmap_mode="r")``: one copy in the page cache for all of them).

``key`` is a SHA-256 over the data's fingerprint (the arrays as read from their file), every key that shapes the
split, the versions of numpy, datasets and flwr-datasets, and the bytes of the split code itself
(``tasks/data.py``, ``tasks/sources.py``): a changed split, or changed code, never reads an old file.

The file is one int64 ``.npy`` array: ``MAGIC``, ``FORMAT``, m, the number of rows, the content's SHA-256 (four
words), the m + 3 offsets (test | server | client 0 | ... | client m-1), then the rows. Every read is checked
before use: a regular file, at most the size its split can have, the header, offsets that rise from 0 to the end,
every row in [0, rows) at most once, and the digest. A file that fails is named in a warning and made again; a
folder that cannot be written (read-only data-dir) leaves the split in memory, as before. zofl replaces a file
by a rename, never in place, so a map a process holds never changes under it; a file edited in place by something
else while a run maps it is outside what these checks guard.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..safeio import FileRefused, check_size, open_regular
from .data import Splits

log = logging.getLogger("zofl")

MAGIC = 0x7A6F666C53504C54  # "zoflSPLT"
FORMAT = 1
HEADER = 8  # MAGIC, FORMAT, m, rows, four digest words
SPLIT_DIR = "splits"
NPY_HEADER_MAX = 4096  # np.save's header of a 1-D int64 array is 128 bytes; bounded generously


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the split code's own source files (tasks/data.py, tasks/sources.py) and the libraries' versions
    that draw the split: part of every key."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("data.py", "sources.py"):
        h.update((here / name).read_bytes())
    for lib in ("numpy", "datasets", "flwr-datasets"):
        try:
            h.update(f"{lib}={metadata.version(lib)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=none;".encode())
    return h.hexdigest()


def split_key(fields: Mapping[str, Any]) -> str:
    """The file key of a split: SHA-256 (20 hex digits) over ``fields`` (JSON, sorted) and ``code_digest``."""
    blob = json.dumps(dict(fields), sort_keys=True, default=str) + code_digest()
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def index_path(folder: str | os.PathLike, name: str, m: int, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60] or "data"
    return Path(folder) / SPLIT_DIR / f"{safe}-m{m}-{key}.npy"


def _digest(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(offsets, dtype="<i8").tobytes())
    h.update(memoryview(np.ascontiguousarray(rows, dtype="<i8")).cast("B"))
    return np.frombuffer(h.digest(), dtype="<i8")


def encode(splits: Splits, num_rows: int) -> np.ndarray:
    """The index array of ``splits`` (module docstring); ``num_rows``: the rows its indices point into."""
    parts = [splits.test, splits.server, *splits.clients]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype("<i8")
    rows = np.concatenate([np.asarray(p, dtype="<i8") for p in parts]) if parts else np.zeros(0, "<i8")
    head = np.array([MAGIC, FORMAT, len(splits.clients), num_rows], dtype="<i8")
    return np.concatenate([head, _digest(offsets, rows), offsets, rows])


def decode(arr: np.ndarray, num_rows: int, m: int) -> Splits:
    """``Splits`` of an index array, every part a view of ``arr`` (a memory map stays one); ValueError naming what
    is wrong: the header, the offsets, a row out of range or repeated, the digest."""
    if arr.dtype != np.dtype("<i8") or arr.ndim != 1 or len(arr) < HEADER + m + 3:
        raise ValueError(f"not an index of {m} clients (dtype {arr.dtype}, shape {arr.shape})")
    if int(arr[0]) != MAGIC or int(arr[1]) != FORMAT or int(arr[2]) != m or int(arr[3]) != num_rows:
        raise ValueError("its header is not this split's (magic, format, m, rows)")
    offsets, rows = arr[HEADER:HEADER + m + 3], arr[HEADER + m + 3:]
    if int(offsets[0]) != 0 or int(offsets[-1]) != len(rows) or np.any(np.diff(offsets) < 0):
        raise ValueError("its offsets do not rise from 0 to the number of indices")
    if len(rows) > num_rows or (len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= num_rows)):
        raise ValueError(f"it indexes rows outside [0, {num_rows})")
    if len(rows) and int(np.bincount(rows, minlength=num_rows).max()) > 1:
        raise ValueError("it names a row twice")
    if not np.array_equal(_digest(offsets, rows), np.asarray(arr[4:HEADER])):
        raise ValueError("its content does not match its digest")
    o = [int(v) for v in offsets]
    return Splits(rows[o[0]:o[1]], rows[o[1]:o[2]], tuple(rows[o[i]:o[i + 1]] for i in range(2, m + 2)))


def read_index(path: Path, num_rows: int, m: int) -> Splits | None:
    """The split stored at ``path``, memory-mapped and checked; None when there is none; a file that fails a check
    is named in a warning and None returned (the caller makes the split again and replaces it)."""
    cap = 8 * (HEADER + m + 3 + num_rows) + NPY_HEADER_MAX
    try:
        fd = open_regular(path, "split index")
    except FileNotFoundError:
        return None
    except (OSError, FileRefused) as exc:
        log.warning("split index %s cannot be read (%s): the split is made again", path, exc)
        return None
    try:
        check_size(fd, path, cap, "split index")
        with os.fdopen(os.dup(fd), "rb") as f:  # the descriptor checked above, not the path again
            return decode(_map(f), num_rows, m)
    except (OSError, ValueError, FileRefused) as exc:
        log.warning("split index %s is refused (%s): the split is made again", path, str(exc)[:200])
        return None
    finally:
        os.close(fd)


def _map(f) -> np.ndarray:
    """The 1-D array of an open .npy file as a read-only memory map (ValueError for anything else)."""
    version = np.lib.format.read_magic(f)
    if version != (1, 0):
        raise ValueError(f".npy format {version}, not (1, 0)")
    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=NPY_HEADER_MAX)
    if len(shape) != 1 or fortran or dtype != np.dtype("<i8"):
        raise ValueError(f"an array of shape {shape} and dtype {dtype}, not 1-D int64")
    if shape[0] == 0:
        return np.zeros(0, "<i8")
    return np.memmap(f, dtype="<i8", mode="r", offset=f.tell(), shape=shape)


def write_index(path: Path, splits: Splits, num_rows: int) -> bool:
    """Store ``splits`` at ``path`` atomically (a temporary file in the same folder, then a rename: a reader sees
    the old file or the whole new one, never a part); False, logged, when the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npy")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, encode(splits, num_rows), allow_pickle=False)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True
    except OSError as exc:
        log.info("the split is not stored (%s): each process makes it again", exc)
        return False


def cached(path: Path, num_rows: int, m: int, make: Callable[[], Splits]) -> Splits:
    """The split at ``path`` if one is there and passes every check, else ``make()``, stored there and read back
    as a memory map (every process then shares the one file)."""
    found = read_index(path, num_rows, m)
    if found is not None:
        return found
    splits = make()
    if write_index(path, splits, num_rows):
        again = read_index(path, num_rows, m)
        if again is not None:
            return again
    return splits
