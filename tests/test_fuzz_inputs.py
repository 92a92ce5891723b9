"""Fuzz of the inputs users hand over (issue 30): run-config values, grid TOML files, .npz data files
and run folders to plot. Each kind gets many hostile or garbled cases from a seeded generator of our
own (deterministic: the same cases on every run), and every case must be refused as the project's
standard says: exit code 2 and one line on stderr, no traceback, within a generous time bound.

The CLI is called in-process (``zofl.cli.main``, stderr captured, SystemExit caught) for speed; a
few real subprocess calls show that the in-process harness sees what a user sees. ``zofl run`` never
gets to start Flower here: ``zofl.launch.local_superlink`` is replaced by a trap, so a case the checks
wrongly accept fails the test at once (as "accepted") instead of starting a run. The number of cases
per kind is printed (pytest -s) and listed in docs/robustness.md.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
import time
import tomllib
import traceback
import zipfile
from pathlib import Path

import numpy as np
import pytest

from zofl.config import KEYS

SEED = 30  # the number: change it to explore other cases
CASE_LIMIT_S = 20.0  # per case: generous (a refusal takes milliseconds; a load of 8 slows it)
ROOT = Path(__file__).resolve().parent.parent


class Accepted(Exception):
    """The checks let a hostile case through to Flower's start."""


@pytest.fixture
def harness(tmp_path, monkeypatch):
    """``call(argv) -> (exit code, stderr, seconds)`` of ``zofl ARGV`` in this process."""
    import zofl.launch

    def trap(*args, **kwargs):
        raise Accepted("the run-config was accepted and Flower would start")

    monkeypatch.setattr(zofl.launch, "local_superlink", trap)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from zofl.cli import main

    def call(argv: list[str]) -> tuple[int, str, float]:
        err, out = io.StringIO(), io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse, the runner
                code = exc.code if isinstance(exc.code, int) else 1
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)  # what the interpreter prints for sys.exit("...")
            except Accepted:
                code = "accepted"
            except BaseException:  # noqa: BLE001 - the very thing this test looks for
                code = "traceback"
                traceback.print_exc()
        return code, err.getvalue(), time.perf_counter() - t

    return call


def _check_all(call, cases: list[tuple[str, list[str]]], kind: str) -> None:
    """Every case exits 2 with one stderr line, no traceback, in time; the failures are listed together."""
    bad = []
    for label, argv in cases:
        code, err, secs = call(argv)
        lines = [line for line in err.splitlines() if line.strip()]
        if code != 2 or len(lines) != 1 or "Traceback" in err or secs > CASE_LIMIT_S:
            bad.append(f"{label}: exit {code}, {secs:.1f} s, stderr {err[-600:]!r}")
    print(f"\nfuzz {kind}: {len(cases)} cases, {len(cases) - len(bad)} refused as required")
    assert not bad, f"{len(bad)} of {len(cases)} {kind} cases not refused in one line, exit 2:\n" + "\n".join(bad[:20])


# -- run-config values (zofl run --set KEY=VALUE) ----------------------------------------------------

GARBAGE_CHARS = "abcxyz019 !#$%&()*+/;<>?@^|~.-_:,'" + "\u00e9\u4e2d\U0001f600"
# strings a garbage word may pass the type check of (a column or array name may be any text; a data-path with ':'
# reads as a module:function loader, refused only when read)
FREE_TEXT = {"task", "data-dir", "output-dir", "run-name", "data-path", "label-column", "feature-columns", "x-key",
             "y-key", "client-column"}
LISTS = {"availability", "local-work", "neumann-steps", "local-sets", "slow-clients", "hostile-clients"}


def _garbage(rng: random.Random, n: int = 12) -> str:
    """A word that is no choice, number or path of any key: it always holds a space or a '!'."""
    return "".join(rng.choice(GARBAGE_CHARS) for _ in range(rng.randint(1, n))) + rng.choice(" !")


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a TOML basic string (JSON's escapes are TOML's)


def _hostile_values(key, rng: random.Random) -> list[str]:
    """--set values (TOML text) that no check may accept for ``key``: wrong types, non-finite or
    out-of-range numbers, integers beyond Flower's sint64, strings Flower cannot carry."""
    huge = ["9223372036854775808", "-9223372036854775809", "1" + "0" * rng.randint(19, 400)]
    not_number = ["true", _toml_str(_garbage(rng)), "[1, 2]", "{a = 1}", "[]", _toml_str("")]
    if key.type is int:
        return [*huge, "-1", "1.5", "nan", "inf", "-inf", "1e400", *not_number, str(-rng.randint(1, 2**62))]
    if key.type is float:
        return [*huge, "-1", "nan", "inf", "-inf", "-1e308", f"-{rng.random() + 0.001:.4f}", *not_number]
    if key.type is bool:
        return ["1", "0", '"true"', _toml_str(_garbage(rng)), "[true]", "nan", "{}"]
    values = ["1", "true", "1.5", "[\"a\"]", "{a = \"b\"}", _toml_str("a\u0000b"), _toml_str("/x\ny"),
              _toml_str('/x"y'), _toml_str("/" + "x" * rng.randint(4097, 9000)), _toml_str("\x7f")]
    if key.name not in FREE_TEXT | LISTS:
        values += [_toml_str(_garbage(rng)) for _ in range(3)]  # no choice holds a space or '!'
    if key.name in ("data-dir", "output-dir"):
        values += [_toml_str("relative/path"), _toml_str(""), _toml_str("~user_that_is_not/x")[:0] or '"a/b"']
    if key.name == "run-name":
        values += [_toml_str(v) for v in ("../up", ".hidden", "a/b", "a b", "x" * 201)]
    if key.name == "task":
        values += [_toml_str(v) for v in ("..x:y", ":y", "x:", "zz_no_module_q:x", "a b", "os:abort", " ",
                                          "zofl.cli:main", "zofl:__version__")]
    if key.name in LISTS:
        values += [_toml_str(v) for v in (",", "1,,2", "1;2", "-1", "nan", "0,x", _garbage(rng))]
    if key.name == "availability":
        values += [_toml_str(v) for v in ("0", "1e-6", "1,0", "0.009", "1.01", "-0.0")]
    return values


def _run_config_cases(tmp_path: Path) -> list[tuple[str, list[str]]]:
    rng = random.Random(SEED)
    out = f'output-dir="{tmp_path / "results"}"'
    cases = []
    for key in KEYS:
        for value in _hostile_values(key, rng):
            cases.append((f"{key.name}={value[:60]}", ["run", "--set", out, f"{key.name}={value}"]))
    for _ in range(40):  # unknown keys, and items that are no KEY=VALUE
        cases.append(("unknown key", ["run", "--set", f"{_garbage(rng, 8).strip()}x=1"]))
    for item in ("seed", "=1", "seed=1\nnum-rounds = 3", "seed=[1,", "seed={", "seed=\"\"\"", "seed= "):
        cases.append((repr(item), ["run", "--set", out, item]))
    for flag, values in (("--cpus-per-client", ["0", "-1", "x", "1.5", "", "1e3", "99999999999999999999"]),
                         ("--ray-cpus", ["0", "-1", "x", "1.5", "", "1025", "99999999999999999999"]),
                         ("--rounds", ["-1", "x", "1.5", "100001", ""]), ("--clients", ["0", "-3", "two"]),
                         ("--strategy", ["fedfoo", "", "zohfl "])):
        cases += [(f"{flag} {v!r}", ["run", flag, v, "--set", out]) for v in values]
    cases.append(("disagreeing shorthand", ["run", "--rounds", "3", "--set", out, "num-rounds=4"]))
    return cases


def test_fuzz_run_config(harness, tmp_path):
    _check_all(harness, _run_config_cases(tmp_path), "run-config")


# -- grid TOML (zofl compare GRID.toml) -----------------------------------------------------------

BASE_GRID = """[fixed]
num-rounds = 2
num-clients = 3
[grid]
strategy = ["zohfl", "fedavg"]
settings = [{alpha = 1000.0, beta = 1.0}, {alpha = 0.5, beta = 0.5}]
seed = [0, 1]
[strategy.fedavg]
local-lr = 0.05
[report]
columns = ["alpha", "beta"]
"""
TOML_CHARS = list('[]{}=",.\n#\'') + ["\x00", "\x7f", "\"\"\"", "[[", "]]", " = ", "\\"]


def _mutate(text: str, rng: random.Random) -> str:
    """A few random edits: deletions, insertions of TOML's own characters, a truncation, a duplicate line."""
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(text) + 1)
        what = rng.random()
        if what < 0.35:
            text = text[:i] + text[i + rng.randint(1, 6):]
        elif what < 0.75:
            text = text[:i] + rng.choice(TOML_CHARS) + text[i:]
        elif what < 0.9:
            text = text[:i]
        else:
            lines = text.splitlines(keepends=True) or [""]
            text += rng.choice(lines)
    return text


def _structural_grids(rng: random.Random) -> list[str]:
    """TOML that parses but is no grid: wrong section types, empty or non-list dimensions, bad keys or
    values in every section, a grid too big to list, unknown sections and report keys."""
    grids = ["fixed = 3\n", "grid = \"x\"\n", "strategy = [1]\n", "report = 1.5\n", "[strategy]\nzohfl = 1\n",
             "[grid]\nseed = 3\n", "[grid]\nseed = []\n", "[grid]\nsettings = [{alpha = -1.0}]\n",
             "[report]\ncolumns = \"alpha\"\n", "[report]\ncolumns = [1]\n", "[report]\ncolumns = [\"alfa\"]\n",
             "[report]\npaired = \"tau=1,2\"\n", "[report]\npaired = [\"tau\"]\n", "[report]\nrows = []\n",
             "[fixed]\n[fixed.sub]\nx = 1\n", "[extra]\nx = 1\n", "",
             "[grid]\n" + "".join(f"k{i} = [{', '.join(str(j) for j in range(10))}]\n" for i in range(20))]
    for key in rng.sample(KEYS, 40):
        value = rng.choice(_hostile_values(key, rng))
        if "\n" in value or len(value) > 2000:
            continue
        section = rng.choice(["[fixed]\n{k} = {v}\n", "[grid]\n{k} = [{v}]\n", "[strategy.zohfl]\n{k} = {v}\n",
                              "[grid]\nsettings = [{{{k} = {v}}}]\n"])
        grids.append(section.format(k=json.dumps(key.name), v=value))
    for _ in range(20):
        grids.append(f"[fixed]\n{json.dumps(_garbage(rng, 8))} = 1\n")
    return grids


def _grid_cases(tmp_path: Path) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(cases that must be refused, mutated files that still parse as TOML: listed or refused)."""
    rng = random.Random(SEED + 1)
    folder = tmp_path / "grids"
    folder.mkdir()
    refused, parsed = [], []

    def add(name: str, content: bytes | None, must_refuse: bool = True):
        path = folder / name
        if content is not None:
            path.write_bytes(content)
        argv = ["compare", str(path), "--out", str(tmp_path / "out"), "--dry-run"]
        (refused if must_refuse else parsed).append((f"{name}: {content[:80] if content else content!r}", argv))

    add("missing.toml", None)
    (folder / "a-folder.toml").mkdir()
    refused.append(("a folder", ["compare", str(folder / "a-folder.toml"), "--out", str(tmp_path / "o")]))
    for i in range(30):
        add(f"binary{i}.toml", b"\xff" + rng.randbytes(rng.randint(0, 300)))
    for i, text in enumerate(_structural_grids(rng)):
        add(f"structure{i}.toml", text.encode())
    for i in range(300):
        text = _mutate(BASE_GRID, rng)
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            add(f"mutated{i}.toml", text.encode("utf-8", "surrogatepass"))
        else:
            add(f"mutated{i}.toml", text.encode(), must_refuse=False)
    return refused, parsed


def test_fuzz_grid_toml(harness, tmp_path):
    refused, parsed = _grid_cases(tmp_path)
    _check_all(harness, refused, "grid TOML")
    bad = []
    for label, argv in parsed:  # still TOML: listed (exit 0) or refused in one line (exit 2), never a traceback
        code, err, secs = harness(argv)
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
        if code not in (0, 2) or (code == 2 and len(lines) != 1) or "Traceback" in err or secs > CASE_LIMIT_S:
            bad.append(f"{label}: exit {code}, stderr {err[-600:]!r}")
    print(f"fuzz grid TOML: {len(parsed)} mutated files that still parse, each listed or refused in one line")
    assert not bad, "\n".join(bad[:20])


# -- .npz data files (zofl data get NAME --from FILE.npz) -------------------------------------------

KERAS = ("x_train", "y_train", "x_test", "y_test")


def _good_arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x_train": rng.integers(0, 255, (20, 28, 28), dtype=np.uint8), "y_train": np.arange(20) % 10,
            "x_test": rng.integers(0, 255, (5, 28, 28), dtype=np.uint8), "y_test": np.arange(5) % 10}


def _npy(header: dict | bytes, data: bytes, version: tuple[int, int] = (1, 0)) -> bytes:
    buf = io.BytesIO()
    if isinstance(header, bytes):  # a raw, possibly garbled, header
        buf.write(b"\x93NUMPY" + bytes(version) + len(header).to_bytes(2, "little") + header)
    else:
        np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + data


def _zip(members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as z:
        for name, content in members.items():
            z.writestr(name, content)
    return buf.getvalue()


def _good_members(rng: np.random.Generator) -> dict[str, bytes]:
    out = {}
    for k, a in _good_arrays(rng).items():
        buf = io.BytesIO()
        np.save(buf, a)
        out[f"{k}.npy"] = buf.getvalue()
    return out


def _hostile_header(prng: random.Random) -> dict | bytes:
    """A .npy header that lies or is garbled: absurd, negative or mismatched shapes, odd dtypes, bad text."""
    shape = tuple(prng.choice([0, 1, 3, 28, 2**31, 2**40, 2**62, -1, 10**6]) for _ in range(prng.randint(0, 5)))
    descr = prng.choice(["|u1", "<f8", "<i8", "|O", "<U10", "|V8", "<c16"])
    what = prng.random()
    if what < 0.6:
        return {"descr": descr, "fortran_order": prng.random() < 0.2, "shape": shape}
    if what < 0.8:
        return repr({"descr": prng.choice(["xyz", "", "<f99", "|S0"]), "fortran_order": False,
                     "shape": shape}).encode().ljust(118) + b"\n"
    return bytes(prng.randrange(256) for _ in range(prng.randint(0, 200)))


def _npz_cases(tmp_path: Path) -> list[tuple[str, bytes]]:
    """(label, file content) of hostile .npz files; every one must be refused."""
    rng, prng = np.random.default_rng(SEED + 2), random.Random(SEED + 2)
    good = _good_members(rng)
    good_file = _zip(good)
    cases = [("empty", b""), ("text", b"x_train,y_train\n1,2\n"), ("npy", good["x_train.npy"]),
             ("pickle", b"\x80\x04\x95" + prng.randbytes(50)), ("gzip", b"\x1f\x8b\x08" + prng.randbytes(50))]
    for i in range(60):  # headers that lie about the member
        members = dict(good)
        victim = prng.choice(list(members))
        header = _hostile_header(prng)
        data = prng.randbytes(prng.choice([0, 8, 100, 784]))
        members[victim] = _npy(header, data, version=prng.choice([(1, 0), (1, 0), (3, 0), (9, 9)]))
        content = _zip(members, prng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
        cases.append((f"header{i} {victim} {str(header)[:60]}", content))
    for i in range(40):  # truncated anywhere
        cases.append((f"truncated{i}", good_file[:prng.randrange(len(good_file))]))
    offsets = [good_file.index(good[n]) for n in good]  # where each member's bytes are stored
    for i in range(40):  # one byte of a member's data changed: its CRC-32 no longer matches
        raw = bytearray(good_file)
        member = prng.randrange(len(good))
        pos = offsets[member] + prng.randrange(len(good[list(good)[member]]))
        raw[pos] ^= prng.randrange(1, 256)
        cases.append((f"flipped{i}", bytes(raw)))
    for i in range(30):  # the right bytes under the wrong names, too few or too many arrays
        members = dict(good)
        what = prng.random()
        if what < 0.3:
            members.pop(prng.choice(list(members)))
        elif what < 0.6:
            members[f"{_garbage(prng, 6).strip() or 'x'}.npy"] = good["y_test.npy"]
        else:
            members = {f"{k}.txt": v for k, v in members.items()}
        cases.append((f"members{i}", _zip(members)))
    for i in range(30):  # well-formed arrays of unusable content
        arrays = _good_arrays(rng)
        k = prng.choice(KERAS)
        arrays[k] = prng.choice([np.full(arrays[k].shape, np.nan), arrays[k][:-1], np.zeros((0,)),
                                 np.array(["a"] * len(arrays[k])), np.zeros((len(arrays[k]), 2, 2), dtype=np.int8) - 1,
                                 *([arrays[k].astype(np.float32) + 0.5] if k.startswith("y") else [])])
        if k.startswith("y") and arrays[k].dtype.kind in "iu" and arrays[k].size and arrays[k].min() >= 0:
            arrays[k] = arrays[k] + 10  # labels out of [0, 10) (the one case above a label array could pass)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        cases.append((f"content{i} {k}", buf.getvalue()))
    return cases


def test_fuzz_npz_files(harness, tmp_path):
    cases = []
    for i, (label, content) in enumerate(_npz_cases(tmp_path)):
        path = tmp_path / f"case{i}.npz"
        path.write_bytes(content)
        cases.append((label, ["data", "get", "mnist", "--data-dir", str(tmp_path / "d"), "--from", str(path)]))
    _check_all(harness, cases, "npz file")
    assert not (tmp_path / "d" / "mnist.npz").exists()


# -- run folders (zofl plot RUN_DIR) ----------------------------------------------------------------

def _bad_record(prng: random.Random) -> str:
    """One line no plot may draw: not JSON, not an object, or a record without an integer round or with
    values that are no numbers."""
    good = {"round": prng.randint(0, 9), "test_acc": prng.random(), "test_loss": prng.random()}
    what = prng.randrange(6)
    if what == 0:
        return prng.choice(["{", "[1, 2]", "3", "null", '"text"', "{'round': 0}", "{\"round\": 0,}", "NaN x"])
    if what == 1:
        return json.dumps({k: v for k, v in good.items() if k != "round"})
    if what == 2:
        return json.dumps({**good, "round": prng.choice(["0", 1.5, True, None, [0], {}])})
    if what == 3:
        return json.dumps({**good, prng.choice(["test_acc", "test_loss"]): prng.choice(["high", True, [0.1], {}])})
    if what == 4:
        return json.dumps({**good, "test_acc": prng.choice([1e308, -1e305])})
    return _garbage(prng, 30)


def _plot_cases(tmp_path: Path) -> list[tuple[str, list[str]]]:
    prng = random.Random(SEED + 3)
    png = str(tmp_path / "p.png")
    cases = []

    def folder(name: str, rounds: bytes | None, config: bytes | None = None) -> str:
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        if rounds is not None:
            (d / "rounds.jsonl").write_bytes(rounds)
        if config is not None:
            (d / "config.json").write_bytes(config)
        return str(d)

    good = (json.dumps({"round": 0, "test_acc": 0.1, "test_loss": 2.0}) + "\n").encode()
    cases.append(("missing", ["plot", str(tmp_path / "nowhere"), "--out", png]))
    cases.append(("empty folder", ["plot", folder("empty", None), "--out", png]))
    (tmp_path / "a-file").write_text("x")
    cases.append(("a file", ["plot", str(tmp_path / "a-file"), "--out", png]))
    d = folder("dir-rounds", None)
    (Path(d) / "rounds.jsonl").mkdir()
    cases.append(("rounds.jsonl a folder", ["plot", d, "--out", png]))
    for i in range(20):
        cases.append((f"blank{i}", ["plot", folder(f"blank{i}", b" \n" * prng.randint(0, 5)), "--out", png]))
    for i in range(60):
        cases.append((f"binary{i}", ["plot", folder(f"binary{i}", b"\xff" + prng.randbytes(prng.randint(0, 500))),
                                     "--out", png]))
    for i in range(150):
        lines = [good.decode().strip() for _ in range(prng.randint(0, 3))]
        lines.insert(prng.randint(0, len(lines)), _bad_record(prng))
        text = "\n".join(lines) + "\n"
        cases.append((f"records{i}: {text[:80]!r}", ["plot", folder(f"records{i}", text.encode()), "--out", png]))
    for i in range(30):
        config = prng.choice([b"\xff\xfe", b"{", b"[1]", b"3", b"", b"null", prng.randbytes(40)])
        cases.append((f"config{i}", ["plot", folder(f"config{i}", good, config), "--out", png]))
    good_run = folder("good", good)
    for out in (str(tmp_path), str(tmp_path / "no" / "p.png"), str(tmp_path / "p.docx"), str(tmp_path / "p.xyz")):
        cases.append((f"--out {out}", ["plot", good_run, "--out", out]))
    cases.append(("good and bad", ["plot", good_run, str(tmp_path / "runs" / "binary0"), "--out", png]))
    return cases


def test_fuzz_plot_folders(harness, tmp_path):
    _check_all(harness, _plot_cases(tmp_path), "plot folder")
    assert not (tmp_path / "p.png").exists()  # nothing drawn for a refused case


# -- the in-process harness is what a user sees ---------------------------------------------------------

def test_the_in_process_harness_matches_real_processes(harness, tmp_path):
    """One case of each kind in a real ``python -m zofl.cli`` process: the same exit code and line."""
    bad_npz = tmp_path / "bad.npz"
    bad_npz.write_bytes(b"hello")
    (tmp_path / "g.toml").write_text("[grid\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rounds.jsonl").write_bytes(b"\xff\x00")
    cases = [["run", "--set", "availability=\"0\"", "strategy=\"fedbuff\"", "engine=\"async\""],
             ["run", "--set", "seed=9223372036854775808"], ["run", "--cpus-per-client", "0"],
             ["compare", str(tmp_path / "g.toml"), "--out", str(tmp_path / "o"), "--dry-run"],
             ["data", "get", "mnist", "--data-dir", str(tmp_path / "d"), "--from", str(bad_npz)],
             ["plot", str(tmp_path / "run"), "--out", str(tmp_path / "p.png")]]
    assert harness(["run", "--set", f'output-dir="{tmp_path}"', "num-clients=3"])[0] == "accepted"  # the trap works
    for argv in cases:
        code, err, _ = harness(argv)
        res = subprocess.run([sys.executable, "-m", "zofl.cli", *argv], capture_output=True, text=True, timeout=120,
                             cwd=ROOT, env={"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
        assert (res.returncode, res.stderr) == (code, err) == (2, err), (argv, res.returncode, res.stderr, code, err)
