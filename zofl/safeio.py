"""Bounded readers of the files zofl reads from its users: grid files, run folders' JSON files and records.

Every such file is opened non-blocking (a FIFO then fails at once instead of waiting for a writer forever),
must be a regular file (not a FIFO, a device such as /dev/zero, a folder or a socket), is refused when fstat
says it is larger than its cap and is read to at most cap + 1 bytes (a file that grows while read, or one
whose size fstat does not tell, is refused too), and is parsed with a bound on nesting (json's and tomllib's
parsers recurse once per level: 5,000 nested arrays were a RecursionError traceback). Every refusal is a
``FileRefused``, a ConfigError, so every command prints it in one line and exits 2; it names the file (and
line), what was found (size, kind, depth) and the limit.
"""
from __future__ import annotations

import errno
import itertools
import json
import os
import re
import stat
import tomllib
from typing import Any, BinaryIO, Iterator

from .settings import ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# The caps: no file zofl writes, nor any grid a person writes, comes near them, and each is small enough to
# hold in memory at once (a 4 GiB grid file was a MemoryError, /dev/zero grew the process to 17.6 GB).
GRID_CAP = 1 * MiB  # a grid file: the committed studies' are under 2 KiB; 1 MiB is ~20,000 lines of keys
JSON_CAP = 1 * MiB  # config.json (~1 KiB: a value per run-config key), data.json (~0.2 KiB), summary.json (~0.5 KiB)
RECORD_CAP = 8 * MiB  # one line of rounds.jsonl: ~1 KiB of numbers plus its lists of client ids ('sampled',
#                       'failed_clients', 'outliers', ~7 bytes an id): 8 MiB lists a million clients a round
ROUNDS_CAP = 2 * GiB  # rounds.jsonl: at most a million records (FedNest's communication rounds at num-rounds =
#                       100,000, zofl.settings.MAX_ROUNDS) of ~1 KiB: 1 GB, doubled
MAX_DEPTH = 32  # nesting of arrays and tables/objects: zofl's files nest at most 4 levels (a grid's [grid]
#                 settings = [{...}] list of tables), far below the ~1,000 where Python's parsers fail

_KINDS = ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link"))


class FileRefused(ConfigError):
    """A user's file refused by a bounded reader: not a regular file, larger than its cap, or nested deeper
    than the limit; the one-line message names the file (and line) and the rule."""


def kind(mode: int) -> str:
    """What a file of st_mode ``mode`` is, in words ("FIFO (named pipe)", "character device", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _human(n: int) -> str:
    """A cap in words: 1 MiB, 2 GiB."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def check_regular(fd: int, path: str | os.PathLike, what: str) -> os.stat_result:
    """fstat of an open ``fd``; a FileRefused naming ``path`` unless it is a regular file (the descriptor is
    left to the caller to close)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path}: is a {kind(st.st_mode)}, not a regular file; a {what} is read only from a "
                          f"regular file")
    return st


def open_regular(path: str | os.PathLike, what: str) -> int:
    """A descriptor of the regular file ``path`` (links followed), opened read-only, non-blocking (opening a
    FIFO waits for a writer otherwise) and not inherited by exec'd programs. Anything but a regular file is a
    FileRefused naming it; a missing or unreadable file is the OSError of os.open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO and os.path.exists(path):  # ENXIO: a socket (or a device without its driver)
            raise FileRefused(f"{path}: is a {kind(os.stat(path).st_mode)}, not a regular file; a {what} is read "
                              f"only from a regular file") from None
        raise
    try:
        check_regular(fd, path, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_size(fd: int, path: str | os.PathLike, cap: int, what: str) -> None:
    """Refuse (FileRefused naming ``path``, its size and the cap) an open ``fd`` that is not a regular file or
    that fstat says is larger than ``cap``: before a byte is read."""
    size = check_regular(fd, path, what).st_size
    if size > cap:
        raise FileRefused(f"{path}: {size:,} bytes, more than the {_human(cap)} ({cap:,} bytes) a {what} may be")


def _grew(path: str | os.PathLike, cap: int, what: str) -> FileRefused:
    return FileRefused(f"{path}: more than {cap:,} bytes read (it grew while read), more than the {_human(cap)} a "
                       f"{what} may be")


def read_fd(fd: int, path: str | os.PathLike, cap: int, what: str) -> bytes:
    """All bytes of the open regular file ``fd`` (named ``path`` in messages): refused when fstat says it is
    larger than ``cap`` (``check_size``), and read to at most cap + 1 bytes, so a file that grows while read
    (or whose size fstat does not tell, as /proc's) is refused too instead of filling memory."""
    check_size(fd, path, cap, what)
    chunks, got = [], 0
    while got <= cap:
        chunk = os.read(fd, min(cap + 1 - got, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got > cap:
        raise _grew(path, cap, what)
    return b"".join(chunks)


def read_lines(f: BinaryIO, path: str | os.PathLike, line_cap: int, cap: int, what: str,
               line_what: str) -> Iterator[str]:
    """The lines (text, with their newlines; the last may lack its own) of the open binary file ``f``, for a
    file of records read line by line: the file refused when fstat says it is larger than ``cap``, each line
    read to at most ``line_cap`` + 1 bytes and refused beyond ``line_cap`` (no line of ``line_what`` is that
    long), all of them together refused beyond ``cap`` (a file that grows). Memory stays a line's worth,
    however the file ends. Text that is no UTF-8 is a UnicodeDecodeError."""
    check_size(f.fileno(), path, cap, what)
    total = 0
    for number in itertools.count(1):
        line = f.readline(line_cap + 1)
        if not line:
            return
        if len(line) > line_cap:
            raise FileRefused(f"{path}, line {number}: more than {line_cap:,} bytes, more than the {_human(line_cap)} "
                              f"a {line_what} may be")
        total += len(line)
        if total > cap:
            raise _grew(path, cap, what)
        yield line.decode("utf-8")


def read_user_bytes(path: str | os.PathLike, cap: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them (``open_regular``, ``read_fd``)."""
    fd = open_regular(path, what)
    try:
        return read_fd(fd, path, cap, what)
    finally:
        os.close(fd)


def read_json(path: str | os.PathLike, cap: int, what: str) -> Any:
    """The JSON value of the regular file ``path`` (at most ``cap`` bytes, ``MAX_DEPTH`` levels); bounds
    are FileRefused, text that is no UTF-8 or no JSON the ValueError of its parser, a missing file OSError."""
    return load_json(read_user_bytes(path, cap, what).decode("utf-8"), str(path))


# -- nesting -----------------------------------------------------------------------------------------
# what is skipped while counting brackets: strings (and, in TOML, comments); a bracket is a token of its own
# (possessive, the closing quote optional: a token, once begun, always matches, so the scan is linear in the
# text whatever it holds; an unclosed string runs to the end, as its parser would read it)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.S)
_TOML_TOKENS = re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*+(?:""")?|\'\'\'(?:[^\']|\'(?!\'\'))*+(?:\'\'\')?'
                          r'|"(?:[^"\\\n]|\\.)*+"?|\'[^\'\n]*+\'?|#[^\n]*+|[\[\]{}]', re.S)


def _too_deep(where: str, depth: int) -> FileRefused:
    return FileRefused(f"{where}: nested deeper than {depth} levels (arrays and tables/objects within each other); "
                       f"zofl's files nest a few levels at most")


def _bracket_depth(text: str, tokens: re.Pattern, limit: int) -> int:
    """How deep [] and {} nest in ``text`` outside strings (and comments), counted up to limit + 1; 0 when
    there are too few brackets to pass ``limit`` (every real file: nothing to scan)."""
    if text.count("[") + text.count("{") <= limit:
        return 0
    depth = deepest = 0
    for m in tokens.finditer(text):
        t = m.group()
        if t == "[" or t == "{":
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                break
        elif t == "]" or t == "}":
            depth = max(0, depth - 1)
    return deepest


def _data_depth(value: Any, limit: int) -> int:
    """How deep lists and dicts nest in a parsed ``value`` (the value itself: 1), counted up to limit + 1
    without recursion (the value may be deeper than Python's recursion limit)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            if d > limit:
                break
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def load_json(text: str, where: str, depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``, refused (FileRefused naming ``where``: a file, or a file and line) when arrays and
    objects nest deeper than ``depth``: counted before parsing (json's parser recurses per level), and a
    RecursionError is refused as well. Text that is no JSON is json's ValueError, as before."""
    if _bracket_depth(text, _JSON_TOKENS, depth) > depth:
        raise _too_deep(where, depth)
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep(where, depth) from None


def load_toml(text: str, where: str, depth: int = MAX_DEPTH) -> dict[str, Any]:
    """``tomllib.loads(text)``, refused (FileRefused naming ``where``) when arrays and tables nest deeper than
    ``depth``: brackets counted before parsing (tomllib recurses per level of arrays and inline tables), a
    RecursionError refused too, and the parsed document measured (dotted keys nest tables without brackets:
    a.a.a...= 1). Text that is no TOML is tomllib's TOMLDecodeError, as before."""
    if _bracket_depth(text, _TOML_TOKENS, depth) > depth:
        raise _too_deep(where, depth)
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise _too_deep(where, depth) from None
    if _data_depth(doc, depth) > depth:
        raise _too_deep(where, depth)
    return doc
