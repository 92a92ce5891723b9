"""Comparison cells as Ray tasks (zofl.ray_cells, ``zofl compare --via ray``): what a node sends back is
checked before anything is written, and a grid run on a two-node Ray cluster gives the numbers of a local
run, on both nodes, resumable."""
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from zofl import ray_cells
from zofl.compare import main
from zofl.ray_cells import CellRefused, environment, ray_cell_result, unpack

GRID = """
[fixed]
num-rounds = 3
num-clients = 4
[grid]
strategy = ["fedavg", "scaffold"]
seed = [1, 2]
"""


def _reply(**files) -> dict:
    base = {"config.json": json.dumps({"strategy": "fedavg", "output-dir": "/node/tmp/x"}, indent=2).encode(),
            "summary.json": json.dumps({"status": "ok", "results_dir": "/node/tmp/x/c"}, indent=2).encode(),
            "data.json": json.dumps({"fingerprint": "aaaa-bbbb"}).encode(), "rounds.jsonl": b"{}\n"}
    base.update(files)
    return {"environment": environment(), "seconds": 1.5, "error": "", "node": "n1",
            "files": {k: v for k, v in base.items() if v is not None}}


def test_a_good_reply_is_written_whole_with_this_machine_s_paths(tmp_path):
    dest = tmp_path / "cells" / "c"
    dest.parent.mkdir()
    unpack(_reply(), dest, str(dest.parent), "aaaa")
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "data.json", "rounds.jsonl", "summary.json"]
    assert json.loads((dest / "config.json").read_text())["output-dir"] == str(dest.parent)
    assert json.loads((dest / "summary.json").read_text())["results_dir"] == str(dest)
    config = {"strategy": "fedavg", "output-dir": str(dest.parent)}
    assert (dest / "config.json").read_text() == json.dumps(config, indent=2) + "\n"  # as zofl.results writes it
    assert (dest / "rounds.jsonl").read_bytes() == b"{}\n"
    assert [p.name for p in dest.parent.iterdir()] == ["c"]  # no temporary folder left


@pytest.mark.parametrize("reply, match", [
    ("not a dict", "not a cell's reply"),
    ({"files": []}, "not a cell's reply"),
    ({**_reply(), "environment": {**environment(), "zofl code": "0" * 64}}, "runs other code"),
    ({**_reply(), "environment": None}, "runs other code"),
    (_reply(**{"../evil": b"x"}), r"^file name '\.\./evil' is not a run folder's file$"),
    (_reply(**{"a/b": b"x"}), "not a run folder's file"),
    (_reply(**{".hidden": b"x"}), "not a run folder's file"),
    (_reply(**{"x.npz": "not bytes"}), "not a run folder's file"),
    (_reply(**{f"f{i}": b"" for i in range(40)}), "files"),
    (_reply(**{"summary.json": None}), "no summary.json"),
    (_reply(**{"config.json": b"\xff not json"}), "config.json is not JSON"),
    (_reply(**{"summary.json": b"[1, 2]"}), "summary.json is not a JSON object"),
    (_reply(**{"data.json": json.dumps({"fingerprint": "cccc-bbbb"}).encode()}), "read other data"),
    (_reply(**{"data.json": None}), "read other data"),
])
def test_a_bad_reply_is_refused_and_nothing_is_written(tmp_path, reply, match):
    """A node with other code, files named to escape the cell's folder, too many files, a summary that is not
    JSON, other data: refused naming it; the cell's earlier folder (if any) and its neighbours stay."""
    cells = tmp_path / "cells"
    (cells / "c").mkdir(parents=True)
    (cells / "c" / "old.txt").write_text("kept")
    with pytest.raises(CellRefused, match=match):
        unpack(reply, cells / "c", str(cells), "aaaa")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["c", "cells", "old.txt"]


def test_a_write_that_fails_midway_leaves_no_temporary_folder_and_the_cells_old_one_whole(tmp_path, monkeypatch):
    """The files go to a temporary folder beside the cell's, renamed over it once all are written: a disk that
    fails on the second file leaves the old folder as it was and no temporary folder behind."""
    dest = tmp_path / "c"
    dest.mkdir()
    (dest / "old.txt").write_text("kept")
    real, written = Path.write_bytes, []

    def write_bytes(self, data):
        if written:
            raise OSError(28, "No space left on device")
        written.append(self)
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    with pytest.raises(OSError, match="No space left"):
        unpack(_reply(), dest, str(tmp_path), "aaaa")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["c", "c/old.txt"]


def test_a_reply_larger_than_the_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cells, "MAX_CELL_BYTES", 1000)
    with pytest.raises(CellRefused, match="bytes"):
        unpack(_reply(**{"checkpoint.npz": b"\0" * 1001}), tmp_path / "c", str(tmp_path), None)
    assert not (tmp_path / "c").exists()


def test_a_good_reply_replaces_an_earlier_folder_of_the_cell_whole(tmp_path):
    dest = tmp_path / "c"
    dest.mkdir()
    (dest / "old.txt").write_text("an interrupted run's file")
    unpack(_reply(), dest, str(tmp_path), "aaaa")
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "data.json", "rounds.jsonl", "summary.json"]


def test_the_caps_are_inclusive_and_count_every_file(tmp_path, monkeypatch):
    """At most MAX_CELL_FILES files and MAX_CELL_BYTES bytes in all: the caps themselves pass; bytes add up over
    the files (two files under the cap each, over it together, are refused)."""
    base = sum(len(v) for v in _reply()["files"].values())
    monkeypatch.setattr(ray_cells, "MAX_CELL_FILES", 6)
    monkeypatch.setattr(ray_cells, "MAX_CELL_BYTES", base + 200)
    unpack(_reply(a=b"\0" * 100, b=b"\0" * 100), tmp_path / "ok", str(tmp_path), "aaaa")  # 6 files, the cap in bytes
    with pytest.raises(CellRefused, match="bytes"):
        unpack(_reply(a=b"\0" * 100, b=b"\0" * 101), tmp_path / "no", str(tmp_path), "aaaa")
    with pytest.raises(CellRefused, match="7 files"):
        unpack(_reply(a=b"", b=b"", c=b""), tmp_path / "no", str(tmp_path), "aaaa")


def test_a_refusal_names_the_node_and_what_differs(tmp_path):
    other = {**environment(), "numpy": "0.0.1"}
    with pytest.raises(CellRefused, match=r"node 'n1' runs other code or libraries: numpy 0\.0\.1 here \d"):
        unpack({**_reply(), "environment": other}, tmp_path / "c", str(tmp_path), "aaaa")
    with pytest.raises(CellRefused, match=r"node 'n1' read other data \(fingerprint 'cccc-bbbb', this machine's "
                                          r"file 'aaaa'\)"):
        unpack(_reply(**{"data.json": json.dumps({"fingerprint": "cccc-bbbb"}).encode()}), tmp_path / "c",
               str(tmp_path), "aaaa")


def test_the_runner_s_reading_of_a_reply(tmp_path):
    """ray_cell_result: a good reply's files written, its seconds, no error and its node given back; the data's
    fingerprint checked; a run that failed with a summary (stopped by the failure policy) written, its error kept."""
    assert ray_cell_result({"run-name": "c"}, _reply(), tmp_path, "aaaa") == ("c", 1.5, "", "n1")
    assert (tmp_path / "c" / "summary.json").exists()
    assert "read other data" in ray_cell_result({"run-name": "d"}, _reply(), tmp_path, "zzzz")[2]
    assert not (tmp_path / "d").exists()
    name, secs, err, node = ray_cell_result({"run-name": "e"}, {**_reply(), "error": "stopped"}, tmp_path, "aaaa")
    assert (name, secs, err, node) == ("e", 1.5, "stopped", "n1") and (tmp_path / "e" / "summary.json").exists()
    assert json.loads((tmp_path / "e" / "config.json").read_text())["output-dir"] == str(tmp_path)
    quiet = {k: v for k, v in _reply().items() if k != "error"}  # no error given: none
    assert ray_cell_result({"run-name": "f"}, {**quiet, "seconds": "soon"}, tmp_path, "aaaa") == ("f", 0.0, "", "n1")
    assert ray_cell_result({"run-name": "g"}, "junk", tmp_path, "aaaa") == ("g", 0.0, "refused what node ? sent: "
                                                                            "not a cell's reply", "?")


def test_a_failed_task_or_run_is_reported_as_the_cell_s_failure(tmp_path):
    name, _, err, _ = ray_cell_result({"run-name": "c"}, RuntimeError("node died"), tmp_path, None)
    assert name == "c" and "the Ray task failed" in err and "node died" in err
    reply = {**_reply(**{"summary.json": None}), "error": "ConfigError('bad')"}
    assert ray_cell_result({"run-name": "c"}, reply, tmp_path, "aaaa")[2] == "ConfigError('bad')"
    assert "refused what node n1 sent" in ray_cell_result({"run-name": "c"}, _reply(**{"../x": b""}), tmp_path,
                                                          "aaaa")[2]
    assert not (tmp_path / "c").exists()


def test_address_is_only_for_via_ray(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    with pytest.raises(SystemExit) as e:
        main([str(grid), "--out", str(tmp_path / "o"), "--address", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--address is for --via ray" in err and len(err.strip().splitlines()) == 1


def _numbers(out: Path) -> dict:
    """Every cell's records and summary, less what measures time or names a folder."""
    timing = re.compile(r"(wall|_s$|compute|startup|results_dir)")
    cells = {}
    for d in sorted((out / "cells").iterdir()):
        recs = [json.loads(line) for line in (d / "rounds.jsonl").read_text().splitlines()]
        summary = json.loads((d / "summary.json").read_text())
        cells[d.name] = ([{k: v for k, v in r.items() if not timing.search(k)} for r in recs],
                         {k: v for k, v in summary.items() if not timing.search(k)})
    return cells


@pytest.mark.flower
def test_a_grid_on_a_two_node_ray_cluster_runs_on_both_nodes_with_local_numbers_and_resumes(tmp_path):
    """`zofl compare --via ray --address` on a cluster of two nodes (two raylets on this machine, 1 CPU each):
    the four cells run on both nodes, their records equal --via inprocess's number for number, a second
    command finds them finished, and every process of the cluster ends with it."""
    from zofl.launch import local_ray_cluster, processes_with_env

    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    cmd = [sys.executable, "-m", "zofl.compare", str(grid), "--via", "ray", "--out", str(tmp_path / "ray")]
    with local_ray_cluster(2, 1) as cluster:
        res = subprocess.run([*cmd, "--address", cluster.address], capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert "Ray cluster: 2 node(s), 2 CPUs" in res.stdout, res.stdout[-3000:]
        nodes = set(re.findall(r"^done \S+ in \d+s on Ray node (\w+)", res.stdout, re.M))
        assert len(nodes) == 2, res.stdout[-3000:]  # both nodes ran cells
        again = subprocess.run([*cmd, "--address", cluster.address], capture_output=True, text=True, timeout=600)
        assert again.returncode == 0 and "4 already finished, 0 to run" in again.stdout, again.stdout[-2000:]
    assert processes_with_env("FLWR_HOME", str(cluster.home)) == []
    local = subprocess.run([sys.executable, "-m", "zofl.compare", str(grid), "--via", "inprocess", "--out",
                            str(tmp_path / "local")], capture_output=True, text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-2000:]
    assert _numbers(tmp_path / "ray") == _numbers(tmp_path / "local")
    assert json.loads((tmp_path / "ray" / "cells" / next(iter(_numbers(tmp_path / "ray"))) / "config.json")
                      .read_text())["output-dir"] == str(tmp_path / "ray" / "cells")


@pytest.mark.flower
def test_via_ray_without_an_address_leaves_nothing_behind_when_killed(tmp_path):
    """`--via ray` with no --address starts a Ray of this machine for the grid; SIGKILL of the runner mid-grid
    ends every process of it (the watchdog finds them by their private FLWR_HOME, under this test's TMPDIR)."""
    tmp = tempfile.mkdtemp(prefix="zt-", dir="/tmp")  # short: Ray's socket paths live under it
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.replace("num-rounds = 3", "num-rounds = 400"))
    proc = subprocess.Popen([sys.executable, "-m", "zofl.compare", str(grid), "--via", "ray", "--out",
                             str(tmp_path / "o")], env={**os.environ, "TMPDIR": tmp}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # the cluster is up and the cells are submitted
            if line.startswith("Ray cluster:"):
                break
        assert _pids_with_home_under(tmp), "no Ray process found under the runner's TMPDIR"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 60
        while _pids_with_home_under(tmp) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _pids_with_home_under(tmp) == []
    finally:
        proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def _pids_with_home_under(prefix: str) -> list[int]:
    """Processes whose FLWR_HOME lies under ``prefix``."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                env = (p / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(e.startswith(b"FLWR_HOME=" + prefix.encode()) for e in env):
                out.append(int(p.name))
    return out


def test_a_node_s_cell_in_this_process(tmp_path, monkeypatch):
    """run_cell (what a Ray task runs; here without Ray): the run folder's files, this machine's environment and
    name, its seconds; a cell whose run fails reports its error and the files it wrote, nothing left behind (in a
    temporary folder of this test's own: other tests' cells run beside it)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    cfg = {"strategy": "fedavg", "num-rounds": 2, "num-clients": 3, "seed": 1, "run-name": "c"}
    before = set(Path(tempfile.gettempdir()).glob("zofl-cell-*"))
    assert before == set()
    reply = ray_cells.run_cell(cfg)
    assert reply["error"] == "" and reply["environment"] == environment() and reply["node"] == platform.node()
    assert {"config.json", "summary.json", "rounds.jsonl", "data.json"} <= set(reply["files"])
    assert all(isinstance(v, bytes) for v in reply["files"].values()) and 0 < reply["seconds"] < 600
    assert json.loads(reply["files"]["summary.json"])["rounds"] == 2
    unpack(reply, tmp_path / "c", str(tmp_path), None)  # a reply the runner accepts
    bad = ray_cells.run_cell({**cfg, "strategy": "no-such-method"})
    assert "no-such-method" in bad["error"] and bad["files"] == {}
    assert set(Path(tempfile.gettempdir()).glob("zofl-cell-*")) == before


def test_the_data_fingerprints_the_runner_checks_replies_against(tmp_path, fake_npz_dir):
    """data_fingerprints: per cell, its data file's fingerprint on this machine (the part before the split's), one
    per data file whatever the split; None for a task that gives none."""
    from zofl.compare import cell_id, data_fingerprints

    base = {"strategy": "fedavg", "num-rounds": 1, "num-clients": 3}
    digits = [{**base, "seed": 1}, {**base, "seed": 2, "alpha": 0.5}]
    mnist = [{**base, "dataset": "mnist", "data-dir": str(fake_npz_dir), "seed": s} for s in (1, 2)]
    toy = {"strategy": "fedrzo-bl", "task": "zofl.tasks.toy:QuadraticBilevel", "num-rounds": 1, "num-clients": 2}
    prints = data_fingerprints([*digits, *mnist, toy])
    assert set(prints) == {cell_id(c) for c in [*digits, *mnist, toy]}
    ours = prints[cell_id(digits[0])]
    assert isinstance(ours, str) and "-" not in ours and prints[cell_id(digits[1])] == ours  # the split is not in it
    assert prints[cell_id(mnist[0])] == prints[cell_id(mnist[1])] != ours
    assert prints[cell_id(toy)] is None


def test_what_the_runner_reports_of_a_failed_task_and_a_foreign_node_is_bounded_and_exact(tmp_path):
    """The report's line for a cell: a failed task's exception (cut to 2,000 characters, no seconds, node "?"), a
    node's name (cut to 80), and what differs in another node's environment (each value cut to 16 characters)."""
    assert ray_cell_result({"run-name": "c"}, RuntimeError("node died"), tmp_path, None) == \
        ("c", 0.0, "the Ray task failed: RuntimeError('node died')", "?")
    long = ray_cell_result({"run-name": "c"}, RuntimeError("x" * 5000), tmp_path, None)[2]
    assert len(long) == 2000 and long.startswith("the Ray task failed: RuntimeError('xxx")
    assert ray_cell_result({"run-name": "c"}, {**_reply(), "node": "n" * 200}, tmp_path, "aaaa")[3] == "n" * 80
    ours = environment()
    theirs = {**ours, "numpy": "9" * 40, "python": "3.0"}
    assert ray_cells._diff(theirs, ours) == f"numpy {'9' * 16} here {ours['numpy'][:16]}; python 3.0 here " \
                                            f"{ours['python'][:16]}"
    assert ray_cells._diff({**ours, "zofl code": "f" * 64}, {**ours, "zofl code": "e" * 64}) == \
        f"zofl code {'f' * 16} here {'e' * 16}"
    assert ray_cells._diff(None, ours) == "no environment given"


def test_a_node_s_error_is_reported_cut_to_2000_characters(tmp_path):
    """A cell's error from its node, with or without files to write, is cut to 2,000 characters in the report."""
    err = "E" * 5000
    alone = ray_cell_result({"run-name": "c"}, {**_reply(**{"summary.json": None}), "error": err}, tmp_path, "aaaa")
    written = ray_cell_result({"run-name": "d"}, {**_reply(), "error": err}, tmp_path, "aaaa")
    assert alone[2] == written[2] == "E" * 2000 and (tmp_path / "d" / "summary.json").exists()


def test_a_node_s_cell_runs_its_clients_in_the_task_s_process_in_a_zofl_cell_folder(tmp_path, monkeypatch):
    """run_cell: the cell's clients run in the Ray task's own process (one CPU each: workers = 0), its run in a
    temporary folder named zofl-cell-* (what a node's operator finds if a task is killed), gone afterwards."""
    monkeypatch.setenv("ZOFL_TEST_PIDS", str(tmp_path / "pids"))
    reply = ray_cells.run_cell({"strategy": "fedavg", "num-rounds": 1, "num-clients": 2, "seed": 1, "run-name": "c",
                                "task": "tests.plugin_task:PidTask"})
    assert reply["error"] == ""
    assert set((tmp_path / "pids").read_text().split()) == {str(os.getpid())}
    folder = Path(json.loads(reply["files"]["config.json"])["output-dir"])
    assert folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith("zofl-cell-")
    assert not folder.exists()


class _Flushed(io.RawIOBase):
    """A stream's bytes as they are flushed to it (what a parent reading the runner's output sees)."""

    def __init__(self):
        self.data = b""

    def writable(self):
        return True

    def write(self, b):
        self.data += bytes(b)
        return len(b)


class _StandInRay:
    """The part of Ray's API run_on_ray and run_cell use, recording each call: a cluster of two live nodes (and a
    dead one) and ``cpus``; tasks finish last-submitted first; ``failing`` cells' tasks raise when their result is
    got. Real clusters run in the two tests above; this one checks run_on_ray's own logic, in mutmut's selection."""

    def __init__(self, cpus=3.0, failing=()):
        self.calls, self.cpus, self.failing, self.pending = [], cpus, set(failing), {}

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))

    def is_initialized(self):
        return True

    def get_runtime_context(self):
        return types.SimpleNamespace(get_node_id=lambda: "0123456789abcdef0123")

    def nodes(self):
        return [{"Alive": True}, {"Alive": False}, {"Alive": True}]

    def cluster_resources(self):
        return {"CPU": self.cpus} if self.cpus is not None else {}

    def remote(self, **options):
        self.calls.append(("remote", options))

        def wrap(fn):
            def submit(cell):
                ref = object()
                self.pending[ref] = (fn, cell)
                return ref
            return types.SimpleNamespace(remote=submit)
        return wrap

    def wait(self, refs, num_returns):
        self.calls.append(("wait", len(refs), num_returns))
        last = [r for r in self.pending if r in refs][-num_returns:]
        return last, [r for r in refs if r not in last]

    def get(self, ref):
        fn, cell = self.pending.pop(ref)
        if cell["run-name"] in self.failing:
            raise RuntimeError(f"the node of {cell['run-name']} died")
        return {"ran": fn.__name__, "cell": cell["run-name"]}

    def shutdown(self):
        self.calls.append(("shutdown",))


def test_run_on_ray_submits_every_cell_as_a_one_cpu_task_and_yields_each_once_as_it_finishes(monkeypatch):
    """run_on_ray's logic on a stand-in for Ray's API: it connects to the cluster given, without the tasks' output
    (log_to_driver False) and with one BLAS thread per task; names the live nodes and the CPUs in a line flushed at
    once; submits run_cell per cell with num_cpus = 1; waits for one task at a time and yields (cell, reply) as
    each finishes, a failed task's exception as its reply; disconnects at the end, and when its reader stops
    early."""
    from zofl.launch import BLAS_THREADS_ENV

    ray = _StandInRay(failing={"b"})
    monkeypatch.setitem(sys.modules, "ray", ray)
    out = _Flushed()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(out), write_through=False))
    cells = [{"run-name": n} for n in "abc"]
    got, printed = [], []
    for cell, reply in ray_cells.run_on_ray(cells, "10.0.0.1:6379"):
        printed.append(out.data.decode())
        got.append((cell, reply))
    assert printed[0] == "Ray cluster: 2 node(s), 3 CPUs\n"
    assert [c for c, _ in got] == cells[::-1] and all(c is cells[2 - i] for i, (c, _) in enumerate(got))
    assert got[0][1] == {"ran": "run_cell", "cell": "c"} and got[2][1] == {"ran": "run_cell", "cell": "a"}
    assert isinstance(got[1][1], RuntimeError) and str(got[1][1]) == "the node of b died"
    assert ray.calls == [
        ("init", {"address": "10.0.0.1:6379", "log_to_driver": False,
                  "runtime_env": {"env_vars": {k: "1" for k in BLAS_THREADS_ENV}}}),
        ("remote", {"num_cpus": 1}), ("wait", 3, 1), ("wait", 2, 1), ("wait", 1, 1), ("shutdown",)]
    early = _StandInRay(cpus=None)
    monkeypatch.setitem(sys.modules, "ray", early)
    out.data = b""
    gen = ray_cells.run_on_ray(cells, "x:1")
    next(gen)
    gen.close()
    assert early.calls[-1] == ("shutdown",) and out.data.decode() == "Ray cluster: 2 node(s), 0 CPUs\n"


def test_a_cell_run_in_a_ray_task_is_named_by_its_ray_node_and_machine(monkeypatch):
    """run_cell inside a Ray task names the node by the first 12 characters of its Ray node id and the machine's
    name (outside Ray, by the machine's name alone: test_a_node_s_cell_in_this_process)."""
    cell = {"strategy": "fedavg", "num-rounds": 1, "num-clients": 2, "seed": 1, "run-name": "c"}
    monkeypatch.setitem(sys.modules, "ray", _StandInRay())
    assert ray_cells.run_cell(cell)["node"] == f"0123456789ab ({platform.node()})"
