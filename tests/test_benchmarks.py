"""Every benchmark script at its smallest setting, on tiny stand-in data, so that none breaks silently
(a script that times the App hooks into it by name). The measured figures are in docs/benchmark-*.md;
nothing here times anything. None goes through Ray (bench_engines' Ray engine reads Flower's own output:
those lines are checked on a real run in tests/test_flower_e2e.py); the scripts that start a SuperLink get
one whose ``run`` has SuperLink.run's signature and runs the run-config with the ServerApp's code on the
in-process Grid (the same records and summary; tests/test_flower_e2e.py ties the two engines together)."""
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script(*args, timeout: int = 600) -> str:
    res = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res.stdout


# runs a benchmark script (argv[1:]) with zofl.launch.local_superlink replaced by an in-process stand-in
WITHOUT_FLOWER = """
import contextlib, inspect, json, os, runpy, subprocess, sys, types
import zofl.launch

RUN = "import json, sys; from zofl.inprocess import run_inprocess; run_inprocess(json.loads(sys.argv[1]), workers=0)"


class InProcessSuperLink:
    proc = types.SimpleNamespace(pid=os.getpid())  # whose process tree a script may sample

    def run(self, *args, **kwargs):
        bound = inspect.signature(zofl.launch.SuperLink.run).bind(self, *args, **kwargs)  # a call Flower's takes
        cfg = json.dumps(dict(bound.arguments["run_config"]))
        return subprocess.run([sys.executable, "-c", RUN, cfg], capture_output=True, text=True)


@contextlib.contextmanager
def local_superlink(*args, **kwargs):
    inspect.signature(zofl.launch.local_superlink).bind(*args, **kwargs)
    yield InProcessSuperLink()


zofl.launch.local_superlink = local_superlink
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture
def data(fake_npz_dir) -> Path:
    """The tiny mnist.npz as fashion_mnist.npz too, and a tiny cifar10.npz (32x32x3, labels as a column)."""
    shutil.copy(fake_npz_dir / "mnist.npz", fake_npz_dir / "fashion_mnist.npz")
    rng = np.random.default_rng(1)
    y = rng.integers(0, 10, (300, 1)).astype(np.uint8)
    x = (rng.integers(0, 60, (300, 32, 32, 3)) + y[:, :, None, None] * 19).astype(np.uint8)
    np.savez(fake_npz_dir / "cifar10.npz", x_train=x[:250], y_train=y[:250], x_test=x[250:], y_test=y[250:])
    return fake_npz_dir


def test_bench_engines_overhead_part_at_its_smallest_setting(data, tmp_path):
    """`bench_engines.py --part overhead` with 2 clients, one repeat, one measured round, in-process: both
    strategies run, the hook's per-round figures are read, and the summary pairs them. (Its Ray engine, two more
    Ray starts, is not run here: the lines it reads of Flower's output are checked on a real run in
    test_flower_e2e.py, test_afbo_on_the_async_engine_...)"""
    out = tmp_path / "overhead.json"
    text = _script("benchmarks/bench_engines.py", "--data-dir", data, "--part", "overhead",
                   "--overhead-clients", 2, "--repeats", 1, "--overhead-rounds", 1, "--overhead-engines", "inprocess",
                   "--out", out)
    assert "ratio" in text
    (row,) = json.loads(out.read_text())["overhead"]["summary"]
    ours, flower = row["fedavg"], row["flwr-fedavg"]
    assert ours["s_per_round"] > 0 and flower["s_per_round"] > 0 and ours["floor_s"] > 0
    assert row["ratio"]["n"] == 1 and row["ratio"]["geomean"] > 0
    assert ours["downlink_bytes"] == flower["downlink_bytes"] > 0 and ours["uplink_bytes"] == flower["uplink_bytes"]
    assert ours["final_test_acc"] == flower["final_test_acc"]  # the same model either way


def test_bench_blas_at_its_smallest_setting(data, tmp_path):
    out = tmp_path / "blas.json"
    _script("benchmarks/bench_blas.py", "--data-dir", data, "--rounds", 1, "--repeats", 1, "--out", out)
    assert json.loads(out.read_text())


def test_bench_torch_at_its_smallest_setting(data, tmp_path):
    out = tmp_path / "torch.json"
    _script("benchmarks/bench_torch.py", "--data-dir", data, "--steps", 5, "--repeats", 1, "--out", out)
    assert json.loads(out.read_text())


def test_bench_zohfl_at_its_smallest_setting(data, tmp_path):
    out = tmp_path / "zohfl.md"
    _script("-c", WITHOUT_FLOWER, "benchmarks/bench_zohfl.py", "--data-dir", data, "--rounds", 1, "--tau", 1,
            "--solver-steps", 10, "--repeats", 1, "--out", out)
    text = out.read_text()
    assert "| wall, Flower ServerApp part (s) |" in text and "| local SGD steps in the run | " in text, text


def test_bench_scale_at_its_smallest_setting(data, tmp_path):
    out = tmp_path / "scale.json"
    text = _script("-c", WITHOUT_FLOWER, "benchmarks/bench_scale.py", "--data-dir", data, "--clients", 4, "--rounds", 2,
                   "--clients-per-node", 0, 2, "--inprocess", "--workers", 0, "--out", out)
    rows = json.loads(out.read_text())["rows"]
    assert [r["layout"] for r in rows] == ["Ray, clients-per-node auto (4 SuperNodes)",
                                           "Ray, clients-per-node 2 (2 SuperNodes)", "in-process Grid, 0 worker(s)"]
    assert len({r["final_acc"] for r in rows}) == 1 and all(r["peak_gib"] > 0 for r in rows), rows
    assert "| in-process Grid, 0 worker(s) |" in text and rows[2]["node_map_s"] is not None


# runs bench_first_answer.py with local_superlink replaced by a stand-in that runs the script's tiny App on the
# in-process Grid (zofl.inprocess, no worker processes): its ServerApp's main, each query to the App's ClientApp
FIRST_ANSWER_WITHOUT_RAY = """
import contextlib, importlib, os, runpy, sys, tomllib
import zofl.launch
from flwr.app import Context, RecordDict
from zofl.inprocess import InProcessGrid


class StandIn:
    def run(self, run_config, num_supernodes, app_dir, timeout):
        components = tomllib.loads((app_dir / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["components"]
        sys.path.insert(0, str(app_dir))
        sys.modules.pop("firstanswer", None)
        grid = InProcessGrid(run_config, num_supernodes, workers=0, client_app=components["clientapp"])
        context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
        importlib.import_module("firstanswer").server(grid, context)
        grid.close()
        sys.path.remove(str(app_dir))
        return type("Done", (), {"returncode": 0, "stdout": "", "stderr": ""})()


@contextlib.contextmanager
def local_superlink(workdir=None, startup_timeout=60.0, extra_env=None):
    os.environ.update(extra_env or {})
    yield StandIn()


zofl.launch.local_superlink = local_superlink
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_bench_first_answer_at_its_smallest_setting(tmp_path):
    """Both tiny Apps (the bare ClientApp and zofl's) answer every node's partition query, each figure written."""
    out = tmp_path / "first.json"
    text = _script("-c", FIRST_ANSWER_WITHOUT_RAY, "benchmarks/bench_first_answer.py", "--nodes", 3, "--repeats", 1,
                   "--out", out)
    rows = json.loads(out.read_text())["rows"]
    assert [r["app"] for r in rows] == ["bare", "zofl"] and all(r["answers"] == 3 and not r["errors"] for r in rows)
    assert all(0 <= r["server_s"] <= r["first_answer_s"] <= r["last_answer_s"] for r in rows), rows
    assert "| bare | 3 | 1 |" in text and "| zofl | 3 | 1 |" in text


def test_bench_splits_at_its_smallest_setting(data, tmp_path):
    out = tmp_path / "splits.json"
    text = _script("benchmarks/bench_splits.py", "--data-dir", data, "--clients", 3, 200, "--out", out)
    rows = json.loads(out.read_text())["rows"]
    assert [r["clients"] for r in rows] == [3, 200] and all(r["same_split"] for r in rows)
    assert rows[1]["moved"] > 0 and rows[1]["min_size"] == 3  # 630 client rows: at most 3 each, topped up
    assert "| 200 | " in text and not list(Path(data).glob("splits"))  # the user's folder untouched


def test_bench_outliers_at_its_smallest_setting(tmp_path):
    """The outlier diagnostic's timing (no data, no Flower): every figure written, the hostile reply 0 flagged."""
    out = tmp_path / "outliers.json"
    text = _script("benchmarks/bench_outliers.py", "--replies", 3, 5, "--dim", 20, "--repeats", 1, "--test-rows", 50,
                   "--out", out)
    rows = json.loads(out.read_text())["rows"]
    assert "far_replies (updates)" in text and [r["replies"] for r in rows] == [3, 5]
    assert all(r["flagged"] == [0] and r["far_replies_models_s"] > 0 and r["test_pass_s"] > 0 for r in rows)


def test_the_scale_pages_show_the_tables_of_their_files():
    """docs/benchmark-scale.md's and benchmark-compare.md's tables are the scripts' renderings of the JSON files
    beside them (no typed figure)."""
    import importlib.util

    def module(name):
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    page = (ROOT / "docs" / "benchmark-scale.md").read_text()
    scale, splits = module("bench_scale"), module("bench_splits")
    for name in ("1000", "10000", "100000", "engines-1000", "engines-10000"):
        rows = json.loads((ROOT / "docs" / f"benchmark-scale-{name}.json").read_text())["rows"]
        assert scale.table(rows) in page, name
    assert splits.table(json.loads((ROOT / "docs" / "benchmark-splits.json").read_text())["rows"]) in page
    first = json.loads((ROOT / "docs" / "benchmark-first-answer.json").read_text())["rows"]
    first_answer = module("bench_first_answer")
    assert first_answer.table(first) in page
    bare = [r["first_answer_s"] - r["server_s"] for r in first if r["app"] == "bare"]
    paired = first_answer.table(first).rsplit("after the ServerApp's start ", 1)[1].removesuffix(" s")
    flat = " ".join(page.split())  # the figures the prose quotes, from the file
    assert f"(bare: {statistics.median(bare):.2f} s median, {min(bare):.2f}-{max(bare):.2f})" in flat
    assert f"within the noise: {paired} s after" in flat, paired
    compare = module("bench_compare")
    figures = json.loads((ROOT / "docs" / "benchmark-compare.json").read_text())
    assert compare.table(figures) in (ROOT / "docs" / "benchmark-compare.md").read_text()
    steady = {r["mode"]: r["steady_cells_per_min"] for r in figures["rows"]}  # the rates docs/compare.md quotes
    cell = figures["timeline"][0]
    quoted = [f"{steady['flower']:.0f} cells/min: every cell", f"{steady['inprocess-2']:.0f} cells/min at",
              f"{steady['ray-1-node']:.0f} (1 node) and {steady['ray-2-nodes']:.0f} (2 nodes) cells/min",
              f"20 rounds took {cell['phases_s']['rounds']:.1f} s\nof its {cell['total_s']:.0f}"]
    page = (ROOT / "docs" / "compare.md").read_text()
    assert all(q in page for q in quoted), [q for q in quoted if q not in page]


def test_bench_compare_at_its_smallest_setting(tmp_path):
    """bench_compare.py's in-process mode on 4 cells of one round (its Flower and Ray modes start runtimes:
    the runner's --via ray is run on a real two-node cluster in tests/test_ray_cells.py)."""
    out = tmp_path / "c.json"
    text = _script("benchmarks/bench_compare.py", "--seeds", 1, "--rounds", 1, "--modes", "inprocess-1", "--out", out)
    assert "| inprocess-1 |" in text
    assert json.loads(out.read_text())["rows"][0]["cells"] == 4
