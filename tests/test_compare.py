"""The comparison runner: grid expansion, resuming, reports."""
import csv
import os
import re

import pandas as pd
import pytest

from zofl.compare import cell_id, expand_grid, main
from zofl.config import ConfigError

GRID = """
[fixed]
num-rounds = 2
num-clients = 3
tau = 2.0
[grid]
strategy = ["zohfl", "fedavg"]
settings = [{alpha = 1000.0, beta = 1.0}, {alpha = 0.5, beta = 0.5}]
seed = [0, 1]
[strategy.fedavg]
local-lr = 0.05
"""


def test_expand_grid():
    import tomllib

    cells = expand_grid(tomllib.loads(GRID))
    assert len(cells) == 8
    assert sum(c["strategy"] == "fedavg" and c["local-lr"] == 0.05 for c in cells) == 4
    assert all("local-lr" not in c for c in cells if c["strategy"] == "zohfl")
    assert len({cell_id(c) for c in cells}) == 8
    assert cell_id(cells[0]) == cell_id(dict(cells[0]))  # stable
    with pytest.raises(ConfigError, match="'alpha'"):
        expand_grid({"grid": {"alpha": [1.0, -1.0]}})
    with pytest.raises(ConfigError, match="non-empty list"):
        expand_grid({"grid": {"seed": 3}})
    # an axis of tables (keys that vary together) must set a key in each entry, and cannot be named after a key
    with pytest.raises(ConfigError, match=r"\[grid\] settings entry 2 is an empty table"):
        expand_grid({"grid": {"settings": [{"beta": 1.0}, {}]}})
    with pytest.raises(ConfigError, match=r"\[grid\] drop-inactive-cuts is a run-config key, so it lists its values"):
        expand_grid({"grid": {"drop-inactive-cuts": [{}]}})


def test_a_grid_with_one_bad_cell_stops_before_any_cell_runs(tmp_path, capsys):
    """The runner checks every cell as far as a run can be checked without its data (the method's own
    rules too, e.g. ZO-HFL's orthogonal directions against the model's dimension, or the envelope
    estimate with a task's own f2), so the bad third cell stops the grid before the first runs; the
    error names the cell and the key. Warnings are said once per grid, before any cell."""
    grid = tmp_path / "g.toml"
    grid.write_text('[fixed]\nnum-rounds = 1\northogonal-directions = true\n[grid]\ndirections = [1, 2, 641]\n')
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main([str(grid), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
    assert e.value.code == 2 and not out.exists()
    assert "grid cell 3 of 3 {\"directions\": 641}: run-config key 'directions'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"grid cell 2 of 2 \{\"estimator\": \"envelope\"\}: .*'estimator'"):
        expand_grid({"fixed": {"task": "zofl.tasks.toy:HierarchicalQuadratic"},
                     "grid": {"estimator": ["two-point", "envelope"]}})
    grid.write_text('[grid]\nstraggler-prob = [0.5, 1.0]\nseed = [0, 1]\n')
    main([str(grid), "--out", str(out), "--dry-run"])
    err = capsys.readouterr().err
    assert err.count("'straggler-prob' = 1") == 1 and "(2 of 4 cells)" in err


def test_runner_writes_reports_and_resumes(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = tmp_path / "out"
    main([str(grid), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
    assert "8 to run" in capsys.readouterr().out
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 8 and {r["strategy"] for r in rows} == {"zohfl", "fedavg"}
    per_round = pd.read_parquet(out / "rounds.parquet")  # every record beside its cell's config
    assert len(per_round) == 8 * 3 and sorted(per_round["round"].unique()) == [0, 1, 2]
    assert set(per_round["cell"]) == {r["cell"] for r in rows} and set(per_round["strategy"]) == {"zohfl", "fedavg"}
    table = (out / "table.md").read_text()
    assert "strategy=fedavg, local-lr=0.05" in table and "(n=2)" in table
    assert len(list((out / "plots").glob("*.png"))) == 2
    # an interrupted cell (no summary.json) runs again; finished ones are skipped
    victim = out / "cells" / rows[0]["cell"]
    (victim / "summary.json").unlink()
    main([str(grid), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
    assert "7 already finished, 1 to run" in capsys.readouterr().out
    assert len(list(csv.DictReader(open(out / "results.csv")))) == 8
    # paired differences over the same seeds, written from the finished cells
    main([str(grid), "--out", str(out), "--report-only", "--paired", "strategy=zohfl,fedavg"])
    paired = (out / "paired.md").read_text()
    assert "### strategy: zohfl - fedavg" in paired and paired.count("(n=2)") == 6  # 2 settings x 3 figures
    assert "local-lr" not in paired  # a [strategy.*] key does not split the pairs
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert all(float(r["x0_test_acc"]) == float(rows[0]["x0_test_acc"]) for r in rows if r["seed"] == rows[0]["seed"]
               and r["alpha"] == rows[0]["alpha"])


def test_a_second_runner_on_the_same_folder_is_refused_before_it_touches_a_cell(tmp_path, capsys):
    """While one runner works on --out, another on the same folder would restart (delete) the cells the
    first is writing: it exits with a message naming the folder, and the unfinished cell is left alone."""
    import fcntl
    import os
    import tomllib

    from zofl.compare import grid_lock

    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = tmp_path / "out"
    unfinished = out / "cells" / cell_id(expand_grid(tomllib.loads(GRID))[0])  # a runner would start it again
    unfinished.mkdir(parents=True)
    with grid_lock(out):  # the first runner (this process, another open file: flock conflicts all the same)
        with pytest.raises(SystemExit) as e:
            main([str(grid), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
        assert e.value.code == 2
        assert "another python -m zofl.compare is running on this folder" in capsys.readouterr().err
        assert unfinished.is_dir() and not (out / "results.csv").exists()
    fd = os.open(out / ".lock", os.O_RDWR)  # released when the runner is done
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def test_statistics_of_the_reports():
    import math

    from zofl.stats import excludes_zero, interval, paired, run_figures

    assert run_figures([0.1, 0.5, 0.4] + [0.3] * 8 + [0.2, 0.6]) == {"final": 0.6, "best": 0.6, "last10": 0.4}
    # the window is the last ceil(0.1 R) records of a run of R rounds (R + 1 records, round 0 included), at
    # least 1. Pinned at lengths where ceil(0.1 R), ceil(0.1 (R + 1)), floor and round disagree: values =
    # the record's index, so last10 = the mean of the window's indices
    window = {1: 1, 2: 1, 5: 1, 9: 1, 10: 1, 11: 2, 15: 2, 19: 2, 20: 2, 21: 3, 29: 3, 30: 3, 31: 4, 100: 10}
    for R, k in window.items():
        got = run_figures([float(i) for i in range(R + 1)])["last10"]
        assert got == (2 * R - k + 1) / 2, (R, k, got)  # mean of R - k + 1, ..., R
    assert run_figures([3.0])["last10"] == 3.0 and math.isnan(run_figures([])["last10"])
    mean, half, n = interval([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3) and math.isclose(half, 4.302652729911275 * 1.0 / math.sqrt(3))
    assert math.isnan(interval([5.0])[1]) and interval([])[2] == 0
    d = paired({0: 3.0, 1: 4.0, 2: 5.0, 7: 100.0}, {0: 1.0, 1: 2.0, 2: 3.1})  # seed 7 has no partner
    assert d[2] == 3 and math.isclose(d[0], 1.9666666666666668) and excludes_zero(d)
    assert not excludes_zero(interval([-1.0, 1.0, 0.5]))
    # n = 2 has an interval; one that only touches 0 does not exclude it; n = 1 and a NaN half-width never do
    assert excludes_zero((1.0, 0.5, 2)) and excludes_zero((-1.0, 0.5, 2)) and not excludes_zero((0.5, 0.5, 5))
    assert not excludes_zero((1.0, 0.5, 1)) and not excludes_zero((1.0, float("nan"), 3))


def test_cell_id_ignores_paths():
    a = {"strategy": "fedavg", "alpha": 0.1, "data-dir": "/a"}
    assert cell_id(a) == cell_id({**a, "data-dir": "/elsewhere"}) != cell_id({**a, "alpha": 0.2})


def test_finished_cells_are_found_by_settings(tmp_path):
    import json

    from zofl.compare import finished_dir
    from zofl.config import defaults

    cell = {"strategy": "fedavg", "alpha": 0.5}
    old = tmp_path / "cells" / "fedavg-digits-oldname"
    old.mkdir(parents=True)
    stored = {**defaults(), **cell, "output-dir": "/x", "run-name": "oldname"}
    del stored["local-lr-schedule"]  # a key the run did not know yet: fine while it is at its default
    stored["gamma"] = 0.5  # a key FedAvg does not read (ZO-HFL's server step): whatever its value
    (old / "config.json").write_text(json.dumps(stored))
    (old / "summary.json").write_text("{}")
    d = finished_dir(tmp_path, cell)
    assert d == tmp_path / "cells" / cell_id(cell) and d.exists() and not old.exists()  # renamed
    stored["local-lr"] = 0.123  # a default FedAvg reads changed since that run: it no longer counts
    (d / "config.json").write_text(json.dumps(stored))
    assert finished_dir(tmp_path, cell) is None


def test_set_is_repeatable(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text("[grid]\nseed = [0]\n")
    main([str(grid), "--out", str(tmp_path / "o"), "--dry-run", "--set", "alpha=2.0", "--set", "beta=0.2"])
    out = capsys.readouterr().out
    assert '"alpha": 2.0' in out and '"beta": 0.2' in out


def test_runner_workers_end_with_the_runner(tmp_path):
    """SIGKILL the runner mid-grid: its worker processes do not keep computing (issue: orphans)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    grid = tmp_path / "grid.toml"
    grid.write_text("[fixed]\nnum-rounds = 2000\nnum-clients = 3\ntau = 20.0\n[grid]\nseed = [0, 1]\n")
    runner = subprocess.Popen([sys.executable, "-m", "zofl.compare", str(grid), "--out", str(tmp_path / "out"),
                               "--via", "inprocess", "--parallel", "2"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.5)
        out = subprocess.run(["pgrep", "-P", str(runner.pid)], capture_output=True, text=True).stdout.split()
        workers = [int(p) for p in out if "spawn_main" in open(f"/proc/{p}/cmdline").read()]
    assert len(workers) == 2
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{w}") and
                                              open(f"/proc/{w}/stat").read().split(")")[-1].split()[0] != "Z"
                                              for w in workers):
        time.sleep(0.5)
    assert not [w for w in workers if os.path.exists(f"/proc/{w}")
                and open(f"/proc/{w}/stat").read().split(")")[-1].split()[0] != "Z"]


def test_one_blas_thread_sets_unset_thread_counts_and_restores_them(monkeypatch):
    import os

    from zofl.launch import one_blas_thread

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own setting is kept
    with one_blas_thread():
        assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "1"
        assert os.environ["OMP_NUM_THREADS"] == "3"
    assert "OPENBLAS_NUM_THREADS" not in os.environ and "MKL_NUM_THREADS" not in os.environ
    assert os.environ["OMP_NUM_THREADS"] == "3"


# -- issue 30: grid files and data that are not what they should be ---------------------------------

def _exit_2(capsys, argv) -> str:
    """main(argv) exits 2 with one line on stderr (no traceback); returns that line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (e.value.code, err)
    return err


@pytest.mark.parametrize("content, match", [
    (None, "no such file"),
    (b"[fixed\nseed = 1\n", "not valid TOML: .*line 1"),
    (b"\x89PNG\r\n\x1a\n\x00\xff", r"not text \(TOML is UTF-8\)"),
    (b"fixed = 3\n", r"fixed must be a table"),
    (b"[strategy]\nzohfl = 1\n", r"strategy.zohfl must be a table"),
    (b"[report]\ncolumns = \"alpha\"\n", r"\[report\] columns must be a list of strings"),
    (b"[report]\ncolumns = [\"alfa\"]\n", r"\[report\] columns \['alfa'\] are not run-config keys"),
    (b"[report]\npaired = [\"tau=[1,\"]\n", "paired comparison"),
    (b"[grid]\n" + b"".join(b"k%d = [%s]\n" % (i, b", ".join(b"%d" % j for j in range(10))) for i in range(20)),
     r"makes 100,000,000,000,000,000,000 cells"),
])
def test_a_grid_file_that_cannot_be_read_is_refused_in_one_line(tmp_path, capsys, content, match):
    """A missing or malformed grid file was a traceback (FileNotFoundError, TOMLDecodeError, TypeError);
    20 dimensions of 10 values would have listed 10**20 cells."""
    grid = tmp_path / "g.toml"
    if content is not None:
        grid.write_bytes(content)
    err = _exit_2(capsys, [str(grid), "--out", str(tmp_path / "out"), "--dry-run"])
    assert err.startswith("zofl compare: error: ") and re.search(match, err), err


def test_bad_arguments_of_the_runner_are_refused_in_one_line(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    out = ["--out", str(tmp_path / "o")]
    assert "expected KEY=VALUE" in _exit_2(capsys, [str(grid), *out, "--set", "seed"])
    assert "more than one TOML line" in _exit_2(capsys, [str(grid), *out, "--set", "seed=1\nalpha=2"])
    # a bare word is a string, as zofl run reads it: refused by the key's own check, naming it
    assert "'seed'" in _exit_2(capsys, [str(grid), *out, "--set", "seed=[1,"])
    assert "is a file" in _exit_2(capsys, [str(grid), "--out", str(grid)])
    assert "no such folder" in _exit_2(capsys, [str(grid), "--out", str(tmp_path / "none"), "--report-only"])
    assert "required: --out" in _exit_2(capsys, [str(grid)])


def test_every_cells_data_file_is_checked_before_any_cell_runs(tmp_path, capsys):
    """Cell 2 reads a corrupt mnist.npz: the grid stops before cell 1 (digits) runs, naming the file."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "mnist.npz").write_bytes(b"PK\x03\x04 not really a zip")
    grid = tmp_path / "g.toml"
    grid.write_text(f'[fixed]\nnum-rounds = 1\nnum-clients = 3\ndata-dir = "{data}"\n[grid]\n'
                    f'dataset = ["digits", "mnist"]\n')
    out = tmp_path / "out"
    err = _exit_2(capsys, [str(grid), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
    assert f"grid cell 2 of 2 (dataset 'mnist'): {data / 'mnist.npz'}: cannot be read as a .npz file" in err
    assert not out.exists()


def test_the_in_process_engine_s_workers_end_with_their_process(tmp_path):
    """SIGKILL a process running the in-process engine with worker processes: the workers end too (before,
    they waited for work for ever: a mutation run left 80 such processes behind)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("from zofl.inprocess import run_inprocess\n"
            f"run_inprocess({{'num-rounds': 5000, 'num-clients': 3, 'tau': 20.0, 'output-dir': {str(tmp_path)!r}}},"
            " workers=2)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
        time.sleep(0.5)
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                  text=True).stdout.split()]
    assert len(workers) == 2, proc.poll()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    def alive(w):
        return os.path.exists(f"/proc/{w}") and open(f"/proc/{w}/stat").read().split(")")[-1].split()[0] != "Z"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(w) for w in workers):
        time.sleep(0.5)
    assert not [w for w in workers if alive(w)]


# -- issue 47: every file read with a size cap, from regular files only, parsed with a depth limit -----------

def _cli(args, cwd, timeout=60) -> tuple[int, str]:
    """A real process of ``python -m zofl.compare ARGS`` (cheap: it stops before any cell runs), with 2 GiB of
    address space and a timeout, so a reader that waits for ever or reads without end fails the test instead
    of hanging it or filling the machine's memory. Returns (exit code, stderr)."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    res = subprocess.run([sys.executable, "-m", "zofl.compare", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=cwd, preexec_fn=limit)
    return res.returncode, res.stderr


@pytest.mark.parametrize("make, match", [
    (lambda p: os.mkfifo(p), r"is a FIFO \(named pipe\), not a regular file"),
    (lambda p: os.symlink("/dev/zero", p), "is a character device, not a regular file"),
    (lambda p: (p.touch(), os.truncate(p, 4 << 30)),  # sparse: no disk
     r"4,294,967,296 bytes, more than the 1 MiB \(1,048,576 bytes\) a grid file may be"),
])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_grid_file_that_is_no_regular_file_or_too_large_is_refused_unread(tmp_path, make, match, dry_run):
    """zofl compare /dev/zero grew to 17.6 GB before it was killed, a 4 GiB file (sparse here: no disk) was a
    MemoryError traceback, a FIFO waited for ever (--dry-run too): each is one line, exit 2, at once."""
    make(tmp_path / "g.toml")
    code, err = _cli(["g.toml", "--out", str(tmp_path / "out"), *(["--dry-run"] if dry_run else [])], tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, err[-2000:])
    assert re.match(rf"zofl compare: error: grid file g.toml: {match}", err), err
    assert not (tmp_path / "out").exists()


def test_a_grid_file_is_read_to_at_most_its_cap_plus_one_byte(tmp_path, monkeypatch):
    """A file whose size fstat does not tell (/proc's say 0) or that grows while read is read to the cap + 1
    bytes, then refused: no read without end however the file behaves."""
    import zofl.compare as compare

    monkeypatch.setattr(compare, "GRID_CAP", 16)
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(real_read(fd, n)) or reads[-1])
    with pytest.raises(ConfigError, match=r"^grid file /proc/self/maps: more than 16 bytes read \(it grew while "
                                          r"read\), more than the 16 bytes a grid file may be$"):
        compare.read_grid("/proc/self/maps")
    assert sum(map(len, reads)) == 17


@pytest.mark.parametrize("text", [
    "a = " + "[" * 5000 + "]" * 5000,  # was a RecursionError traceback of 3,001 lines
    "[grid]\nsettings = [" + "{a = " * 40 + "1" + "}" * 40 + "]\n",  # inline tables
    "[fixed]\n" + ".".join(["a"] * 40) + " = 1\n",  # dotted keys nest tables without a bracket
    "[" + ".".join(["a"] * 40) + "]\nb = 1\n",  # so do table headers
])
def test_a_grid_file_nested_too_deep_is_refused_in_one_line(tmp_path, capsys, text):
    grid = tmp_path / "g.toml"
    grid.write_text(text)
    err = _exit_2(capsys, [str(grid), "--out", str(tmp_path / "out"), "--dry-run"])
    assert err == (f"zofl compare: error: grid file {grid}: nested deeper than 32 levels (arrays and tables/objects "
                   f"within each other); zofl's files nest a few levels at most\n")


def test_brackets_in_strings_and_comments_are_no_nesting(tmp_path, capsys):
    """The depth is counted outside strings and comments: a value holding brackets is no deep grid."""
    grid = tmp_path / "g.toml"
    many = "[" * 100
    grid.write_text(f'# {many}\n[fixed]\nnum-rounds = 1\ndata-dir = "/tmp/{many}"\n'
                    f"[grid]\nseed = [0, 1]  # {many}\n")
    main([str(grid), "--out", str(tmp_path / "out"), "--dry-run"])
    assert capsys.readouterr().out.count(many) == 2


def test_a_set_or_paired_value_nested_too_deep_is_refused_in_one_line(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text("[grid]\nseed = [0, 1]\n")
    deep = "[" * 5000 + "]" * 5000
    assert "--set x: nested deeper than 32 levels" in _exit_2(capsys, [str(grid), "--out", str(tmp_path / "o"),
                                                                        "--set", f"x={deep}", "--dry-run"])
    assert "paired comparison 'seed': nested deeper than 32 levels" in _exit_2(
        capsys, [str(grid), "--out", str(tmp_path / "o"), "--paired", f"seed={deep},1", "--dry-run"])


@pytest.mark.parametrize("grid, match", [
    ("seed = [0, 0]", r"\[grid\] seed lists 0 twice \(values 1 and 2 of 2\)"),
    ("seed = [0, 1, 2, 1]", r"\[grid\] seed lists 1 twice \(values 2 and 4 of 4\)"),
    ("alpha = [1, 1.0]", r"\[grid\] alpha lists 1.0 twice \(values 1 and 2 of 2\)"),
    ('strategy = ["fedavg", "zohfl", "fedavg"]', r'\[grid\] strategy lists "fedavg" twice \(values 1 and 3 of 3\)'),
    ("settings = [{alpha = 1.0, beta = 0.5}, {beta = 0.5, alpha = 1.0}]",
     r'\[grid\] settings lists \{"alpha": 1.0, "beta": 0.5\} twice \(values 1 and 2 of 2\)'),
])
def test_a_grid_value_listed_twice_is_refused_before_any_cell(tmp_path, capsys, grid, match):
    """seed = [0, 0]: the second cell failed (its folder was the first's), results.csv listed the cell twice and
    table.md reported n = 2 from one seed."""
    path = tmp_path / "g.toml"
    path.write_text(f"[fixed]\nnum-rounds = 1\n[grid]\n{grid}\n")
    out = tmp_path / "out"
    err = _exit_2(capsys, [str(path), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
    assert re.match(rf"zofl compare: error: grid file: {match}; each value of a grid key must differ$", err), err
    assert not out.exists()


def test_cells_that_are_one_run_are_refused_before_any_cell(tmp_path, capsys):
    """Values of a [grid] key that --set (or [strategy.*], or another [grid] key) overrides are one run twice."""
    path = tmp_path / "g.toml"
    path.write_text("[fixed]\nnum-rounds = 1\n[grid]\nseed = [0, 1]\n")
    err = _exit_2(capsys, [str(path), "--out", str(tmp_path / "out"), "--set", "seed=3", "--dry-run"])
    assert err.startswith('zofl compare: error: grid cells 1 and 2 of 2 ({"seed": 0} and {"seed": 1}) are one run '
                          '(zohfl-digits-'), err
    assert capsys.readouterr().out == ""


def test_a_cell_file_that_is_no_regular_file_is_refused_when_reporting(tmp_path):
    """--report-only (and every report) reads each cell's config.json and summary.json: a FIFO there waited
    for ever, a config.json nested 100,000 deep was a RecursionError."""
    grid = tmp_path / "g.toml"
    grid.write_text("[fixed]\nnum-rounds = 1\n[grid]\nseed = [0]\n")
    cell = tmp_path / "out" / "cells" / cell_id(expand_grid({"fixed": {"num-rounds": 1}, "grid": {"seed": [0]}})[0])
    cell.mkdir(parents=True)
    (cell / "summary.json").write_text("{}")
    os.mkfifo(cell / "config.json")
    code, err = _cli(["g.toml", "--out", "out", "--report-only"], tmp_path)
    assert (code, err) == (2, f"zofl compare: error: {cell.resolve() / 'config.json'}: is a FIFO (named pipe), not a "
                              f"regular file; a run's config.json is read only from a regular file\n")
    (cell / "config.json").unlink()
    (cell / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    code, err = _cli(["g.toml", "--out", "out", "--report-only"], tmp_path)
    assert code == 2 and err.endswith("config.json: nested deeper than 32 levels (arrays and tables/objects within "
                                      "each other); zofl's files nest a few levels at most\n"), err


def test_a_runner_worker_s_cell_in_this_process(tmp_path):
    """_inprocess_cell (what a --via inprocess worker runs; here in this process): the cell's run written where its
    config says, its name and seconds given back; a run that fails is reported as its error, not raised."""
    import json
    import logging

    from zofl.compare import _inprocess_cell

    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    cfg = {"strategy": "fedavg", "num-rounds": 2, "num-clients": 3, "output-dir": str(tmp_path), "run-name": "c"}
    try:
        name, secs, err = _inprocess_cell(cfg)
        assert flwr_log.level == logging.WARNING  # the worker's Flower log is quiet
        bad = _inprocess_cell({**cfg, "run-name": "d", "strategy": "no-such-method"})
    finally:
        flwr_log.setLevel(level)
    assert (name, err) == ("c", "") and 0 < secs < 600
    assert json.loads((tmp_path / "c" / "summary.json").read_text())["rounds"] == 2
    name, secs, err = bad
    assert name == "d" and err.startswith("ConfigError(") and "no-such-method" in err and 0 <= secs < 600


def test_a_runner_worker_runs_its_cell_s_clients_itself(tmp_path, monkeypatch):
    """A --via inprocess worker is one process per core: its cell's clients run in it (workers = 0), no process
    of their own beside it."""
    import logging

    from zofl.compare import _inprocess_cell

    monkeypatch.setattr(logging.getLogger("flwr"), "level", logging.getLogger("flwr").level)  # the cell sets it
    monkeypatch.setenv("ZOFL_TEST_PIDS", str(tmp_path / "pids"))
    cfg = {"strategy": "fedavg", "num-rounds": 1, "num-clients": 2, "task": "tests.plugin_task:PidTask",
           "output-dir": str(tmp_path), "run-name": "c"}
    assert _inprocess_cell(cfg)[2] == ""
    assert set((tmp_path / "pids").read_text().split()) == {str(os.getpid())}
