"""The AFBO study scripts at their smallest setting, on tiny in-process runs, so that none breaks silently:
experiments/afbo_plot.py (figures with records, tuning) and experiments/afbo_wallclock.py (report)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zofl.inprocess import run_inprocess
from zofl.packed import read_packed, read_table

ROOT = Path(__file__).resolve().parents[2]  # the repository
TINY = {"task": "hyper-cleaning", "num-clients": 3, "server-fraction": 0.0, "local-steps": 2, "lower-lr": 0.5,
        "inner-lr": 0.5, "inner-rounds": 2, "neumann-steps": "2", "lipschitz-g": 20.0, "checkpoint-every": 0}


def _script(*args, env=None) -> str:
    res = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res.stdout


# runs each [script, *args] of argv[1] (JSON) as `python script args` would, in this one process (experiments/ on
# PYTHONPATH, as `python experiments/NAME.py` puts it first), and prints what each printed as one JSON list: the
# scripts' imports (numpy, pandas, matplotlib: ~2 s) once
_SCRIPTS = """
import contextlib, io, json, runpy, sys
outs = []
for call in json.loads(sys.argv[1]):
    sys.argv, buf = [str(a) for a in call], io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as e:
            assert not e.code, (call, e.code)
    outs.append(buf.getvalue())
print(json.dumps(outs))
"""


def _experiments_env() -> dict:
    """This process's environment with experiments/ first on PYTHONPATH, as `python experiments/NAME.py` has it."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "experiments"),
                                                                     os.environ.get("PYTHONPATH")]))}


def _scripts(*calls) -> list[str]:
    """What each ``(script, *args)`` of ``calls`` prints, run one after the other in one process."""
    out = _script("-c", _SCRIPTS, json.dumps([[str(a) for a in call] for call in calls]), env=_experiments_env())
    return json.loads(out.splitlines()[-1])


@pytest.fixture(scope="module")
def cleaning_runs(tmp_path_factory) -> Path:
    """A compare-like folder (cells/) with AFBO and FedNest, each with its outer-lr = 0 control, seeds 0 and 1."""
    root = tmp_path_factory.mktemp("study")
    for seed in (0, 1):
        for strategy, extra in (("afbo", {"engine": "async", "num-rounds": 9}), ("fednest", {"num-rounds": 2})):
            for lr in (10.0, 0.0):
                run_inprocess({**TINY, **extra, "strategy": strategy, "seed": seed, "outer-lr": lr,
                               "output-dir": str(root / "cells"), "run-name": f"{strategy}-{seed}-{lr:g}"}, workers=0)
    return root


def test_afbo_plot_figures_tables_the_auc_the_bilevel_part_and_writes_the_records(cleaning_runs, tmp_path):
    out = tmp_path / "fig"
    _script("experiments/afbo_plot.py", "figures", cleaning_runs, "--out", out, "--no-references", "--records",
            "--thresholds", "0.5,0.6")
    table = (out / "table.md").read_text()
    assert "| AUC at T | time to AUC 0.9 (s) |" in table and "the bilevel part" in table
    summary = json.loads((out / "summary.json").read_text())
    (setting,) = summary.values()
    assert set(setting["paired_differences"]) >= {"afbo_minus_fednest", "controls_afbo_minus_fednest", "bilevel_part"}
    assert setting["paired_differences"]["bilevel_part"]["acc"][2] == 2  # both seeds paired
    rows = read_table(out / "rounds.parquet")
    assert list(rows[0])[-3:] == ["weight_corrupted", "weight_clean", "weight_auc"] and len(rows) > 7
    assert {type(r["seed"]) for r in rows} == {int} and all(isinstance(r["test_acc"], float) for r in rows)
    assert [f.stat().st_size > 10_000 for f in out.glob("fig_*.png")] == [True]
    _script("experiments/afbo_plot.py", "tuning", cleaning_runs, "--out", tmp_path / "tuning", "--records")
    tuning = (tmp_path / "tuning" / "tuning.md").read_text()
    assert "| seed | acc. at T (%)" in tuning
    # each run minus its outer-lr = 0 control at T (same strategy and seed): the upper level's own effect
    with_steps = [r for r in tuning.splitlines() if r.startswith("| ") and "control" not in r and "|---" not in r]
    assert len(with_steps) == 4 and all(re.search(r"\| [+-]\d+\.\d\d, [+-]\d\.\d{4} \|", r) for r in with_steps)
    assert sum(" control |" in r for r in tuning.splitlines()) == 4
    assert (tmp_path / "tuning" / "tuning_rounds.parquet").read_bytes() == (out / "rounds.parquet").read_bytes()


def test_afbo_wallclock_report_pairs_the_two_clocks(cleaning_runs, tmp_path):
    """The report on run folders named as `afbo_wallclock.py run` names them (tiny in-process runs stand in for
    the Ray runs: the report reads only their records and summaries)."""
    runs = tmp_path / "runs"
    cells = cleaning_runs / "cells"
    for seed in (0, 1):
        for arm, src in (("afbo-simulated", f"afbo-{seed}-10"), ("afbo-wall", f"afbo-{seed}-10"),
                         ("fednest", f"fednest-{seed}-10"), ("afbo-simulated-lat", f"afbo-{seed}-10")):
            shutil.copytree(cells / src, runs / f"{arm}-s{seed}")
        conf = runs / f"afbo-simulated-lat-s{seed}" / "config.json"
        cfg = json.loads(conf.read_text())
        (cfg.get("run_config", cfg))["latency-s"] = 0.6
        conf.write_text(json.dumps(cfg))
    out = tmp_path / "report"
    text = _script("experiments/afbo_wallclock.py", "report", runs, "--out", out)
    assert "| AFBO | simulated | 0,1 |" in text and "real seconds beyond the prediction per server step" in text
    assert "| AFBO | simulated, latency-s = 0.6 (calibrated) | 0,1 |" in text
    assert "AFBO against the simulated clock with latency-s = 0.6, whole run" in text
    assert (out / "results.csv").read_text().count("\n") == 9 and (out / "fig.png").exists()
    assert (out / "rounds.parquet").exists()


@pytest.mark.flower  # a run through Ray: in the "ray" group, one at a time (tests/conftest.py)
def test_delay_model_check_runs_through_ray_with_real_delays_and_reports(tmp_path):
    """experiments/delay_model_check.py at its smallest: the calibration (in-process), one AFBO run on the wall clock
    with real-delays = 'compute' through `zofl run` (the Ray simulation; digits, 3 server steps, small delays), and
    the report on it."""
    out = tmp_path / "delays"
    _script("experiments/delay_model_check.py", "run", "--out", out, "--dataset", "digits", "--seeds", "0", "--steps",
            "3", "--calibration-steps", "2", "--comm-s", "0.01", "--arms", "afbo-wall")
    cal = json.loads((out / "calibration.json").read_text())
    cfg = json.loads((out / "afbo-wall-s0" / "config.json").read_text())
    cfg = cfg.get("run_config", cfg)
    assert cal["sim_step_s"] > 0 and cfg["sim-step-s"] == cal["sim_step_s"] and cfg["real-delays"] == "compute"
    assert json.loads((out / "afbo-wall-s0" / "summary.json").read_text())["status"] == "ok"
    text = _script("experiments/delay_model_check.py", "report", out, "--out", tmp_path / "report")
    assert "| AFBO | wall (real compute, real delays, real arrival order) | 0 |" in text
    assert (tmp_path / "report" / "pace.md").exists() and (tmp_path / "report" / "fig.png").exists()
    replies = (tmp_path / "report" / "replies.csv").read_text()
    assert replies.startswith("arm,seed,stragglers_share,staleness\nafbo-wall,0,")


def test_the_comm_study_scripts_reproduce_their_committed_tables(tmp_path):
    """experiments/afbo_comm_*.py on docs/results/afbo/comm's committed records: the tables they print are the
    committed ones, and the figure script runs."""
    comm, results = ROOT / "docs" / "results" / "afbo" / "comm", ROOT / "docs" / "results"
    gaps = "experiments/afbo_comm_gaps_vs_latency.py"
    penalty, loss = "experiments/afbo_comm_straggler_penalty.py", "experiments/afbo_comm_time_to_loss.py"
    outs = _scripts((penalty,), *[(loss, f"docs/results/afbo/comm/{g}/rounds.parquet") for g in ("latency0",
                                                                                               "nostragglers_latency10c")],
                    (gaps, "--out", tmp_path / "gaps.png"), (gaps, "--task", "cleaning", "--out", tmp_path / "c.png"),
                    (penalty, "--task", "cleaning"), (gaps, "--task", "reg-mnist", "--out", tmp_path / "r.png"),
                    (penalty, "--task", "reg-mnist"), (penalty, "--task", "verdict", "--json", tmp_path / "p.json"))
    assert outs[0] == (comm / "penalty.md").read_text()
    assert outs[1:3] == [(comm / g / "time_to_loss.md").read_text() for g in ("latency0", "nostragglers_latency10c")]
    assert (tmp_path / "gaps.png").stat().st_size > 10_000
    # the hyper-cleaning latency sweep: the committed table is what the script prints from the summaries
    assert outs[4].split("\nwrote ")[0] == (results / "afbo_cleaning/latency.md").read_text()
    assert outs[5] == (results / "afbo_cleaning/penalty.md").read_text()
    # and the MNIST regularization sweep
    assert outs[6] == (results / "afbo_reg_mnist/latency.md").read_text()
    assert outs[7] == (results / "afbo_reg_mnist/penalty.md").read_text()
    # and the n = 5 verdict grids (the straggler grid against the two without)
    assert outs[8] == (results / "afbo_verdict/penalty.md").read_text()
    assert (tmp_path / "p.json").read_text() == (results / "afbo_verdict/penalty.json").read_text()


def test_time_to_target_reproduces_the_committed_tables():
    """experiments/afbo_time_to_target.py on the hyper-cleaning study's committed records prints the committed
    tables (times on each run's whole clock, paired ratios)."""
    for study in ("study", "stragglers"):
        folder = ROOT / "docs" / "results" / "afbo_cleaning" / study
        assert _script("experiments/afbo_time_to_target.py", folder / "rounds.parquet", "--target", "0.88") == \
            (folder / "time_to_88.md").read_text()


def test_afbo_wallclock_trace_splits_a_task_s_real_life(cleaning_runs, tmp_path):
    """`afbo_wallclock.py trace` on a synthetic --trace file (the events the sitecustomize hook writes inside
    Flower's simulation process): it names the queue wait and the most ClientApps running at once."""
    runs = tmp_path / "runs"
    shutil.copytree(cleaning_runs / "cells" / "afbo-0-10", runs / "afbo-wall-s0")
    (runs / "afbo-wall-s0" / "machine.json").write_text(json.dumps({"load_before": 1.0, "cpus": 2}))
    events = [{"id": "", "event": "start", "t": 0.0, "vce_workers": 2, "cpus": 2}]
    for k in range(6):  # pushed in pairs; the second of a pair waits 0.1 s for a worker thread
        t0 = 0.4 * (k // 2)
        start = t0 + 0.05 + 0.1 * (k % 2)
        events += [{"id": f"m{k}", "event": "push", "t": t0, "type": "train"},
                   {"id": f"m{k}", "event": "process", "t": start, "end": start + 0.5, "delivered": t0 + 0.05,
                    "partition": k % 3, "steps": 2.0, "speed": 1.0},
                   {"id": f"m{k}", "event": "pull", "t": start + 0.6}]
    (runs / "_trace").mkdir()
    (runs / "_trace" / "afbo-wall-s0.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    text = _script("experiments/afbo_wallclock.py", "trace", runs, "--out", tmp_path / "trace.md")
    assert "ClientApps running at once: at most 3" in text
    assert "| taken -> a worker thread starts it (queue) | 0.050 |" in text
    assert (tmp_path / "trace.md").read_text() == text


def test_afbo_global_script_runs_its_three_methods_and_controls(tmp_path):
    """experiments/afbo_global.py at its smallest setting (two seeds, one outer round each): every arm runs and
    the table carries each paired difference (a broken arm or reader fails here, not in a 40 s study)."""
    out = tmp_path / "out"
    _script("experiments/afbo_global.py", "--runs", tmp_path / "runs", "--out", out, "--seeds", 0, 1,
            "--outer-rounds", 1)
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 6
    table = (out / "table.md").read_text()
    for arm in ("afbo-global control", "fednest control", "| afbo |", "paired difference (afbo-global minus)"):
        assert arm in table
    packed = read_packed(out / "rounds.parquet")
    assert set(packed) >= {"afbo-s0", "afbo-global-control-s1", "fednest-s1"}
    assert packed["afbo-s0"][0]["strategy"] == "afbo" and packed["afbo-s0"][1][0]["round"] == 0


def test_afbo_verdict_counts_every_run_reads_at_equal_budget_and_recomputes_from_its_files(cleaning_runs, tmp_path):
    """experiments/afbo_verdict.py: packs the cells, one table row per method with every run counted, the paired
    readings (gap, controls' gap, the 2 x 2 interaction, final levels) over both seeds; --from gives the same
    summary from the packed files alone."""
    out = tmp_path / "verdict"
    _script("experiments/afbo_verdict.py", cleaning_runs, "--out", out, "--target", "0.5", "--diverged-below", "0")
    summary = json.loads((out / "verdict.json").read_text())
    (S,) = summary.values()
    assert set(S["methods"]) == {"afbo", "afbo:control", "fednest", "fednest:control"}
    assert all(m["n"] == 2 and m["seeds"] == [0, 1] for m in S["methods"].values())
    p = S["paired"]["afbo_minus_fednest"]
    assert p["acc_at_T"][2] == p["interaction_acc_at_T"][2] == p["final_acc"][2] == 2
    # the interaction is the gap less the controls' gap, seed by seed (so also in the mean)
    assert p["interaction_acc_at_T"][0] == pytest.approx(p["acc_at_T"][0] - p["controls_acc_at_T"][0], abs=1e-12)
    assert S["T_s"] == min(float(r["final_clock_s"]) for r in __import__("csv").DictReader(open(out / "runs.csv")))
    table = (out / "verdict.md").read_text()
    assert "| AFBO (async) | 0,1 | 0/2 |" in table
    assert any(c in table for c in ("| stopped rising |", "| rising |", "| undecided |"))
    before = (out / "verdict.json").read_bytes()
    (out / "verdict.json").unlink()
    _script("experiments/afbo_verdict.py", "--from", out, "--target", "0.5", "--diverged-below", "0")
    assert (out / "verdict.json").read_bytes() == before
    (out / "runs.csv").unlink()  # an afbo_plot.py study folder: runs.csv derived from the records
    _script("experiments/afbo_verdict.py", "--from", out, "--target", "0.5", "--diverged-below", "0")
    assert (out / "verdict.json").read_bytes() == before


_ONSETS = """
import json, numpy as np
from afbo_verdict import onset
run = {"seed": 5, "clock": np.arange(6) / 10, "acc": np.full(6, 0.9)}
nan = np.full(6, np.nan)
print(json.dumps([
    onset({**run, "loss": np.array([2.3, 0.5, 0.4, 0.35, 0.71, 9.0]), "spread": nan}),  # 0.71 > 2 x 0.35
    onset({**run, "loss": np.array([2.3, 0.5, 0.4, 0.35, 0.34, np.inf]), "spread": nan}),  # not finite
    onset({**run, "loss": np.array([2.3, 0.5, 0.4, 0.35, 0.7, 0.33]),  # 0.7 = 2 x 0.35: still on its path
           "spread": np.array([0.0, 0.1, 0.2, 0.2, 0.3, 1.31])}),  # up by 1.01 in one record
    onset({**run, "loss": np.array([2.3, 0.5, 0.4, 0.35, 0.7, 0.33]),
           "spread": np.array([0.0, 0.1, 0.2, 0.2, 0.3, 1.29])}),
]))
"""


def test_afbo_verdict_onset_is_where_a_run_first_leaves_its_path():
    """A diverged run's onset: the first record whose test loss is above twice the lowest after x_0's (x_0's own loss
    does not count) or not finite, or whose log-coefficients' spread rose by more than 1 in one record; with the
    last record before it that widened the spread."""
    env = _experiments_env()
    by_loss, not_finite, by_spread, none = json.loads(_script("-c", _ONSETS, env=env))
    assert by_loss["record"] == 4 and by_loss["clock_s"] == 0.4 and by_loss["loss_before"] == 0.35
    assert by_loss["loss_at"] == 0.71 and by_loss["loss_end"] == 9.0 and by_loss["acc_before"] == 0.9
    assert by_loss["spread_at"] is None and by_loss["widened"] is None
    assert not_finite["record"] == 5
    assert by_spread["record"] == 5 and by_spread["spread_before"] == 0.3 and by_spread["spread_at"] == 1.31
    assert by_spread["widened"] == {"clock_s": 0.4, "from": 0.2, "to": 0.3}  # the last widening before the onset
    assert none is None


def test_afbo_replay_reads_x_at_a_round_of_a_grid_cell_and_checks_its_records(tmp_path):
    """experiments/afbo_replay.py at its smallest: a regularization grid of AFBO with its outer-lr = 0 control; the
    replay of the outer-lr > 0 cell reads x at round 4 (the same run: its records match the grid run's), with the
    lower level's stability bound log(2 / lower-lr); a seed the grid lacks, or records that differ, are refused."""
    from zofl.compare import cell_id, expand_grid

    grid = tmp_path / "grid.toml"
    fixed = {**TINY, "task": "regularization", "engine": "async", "strategy": "afbo", "num-rounds": 6, "seed": 0,
             "eval-every": 2}  # records without an evaluation (test_loss null) are compared too
    grid.write_text("[fixed]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fixed.items())
                    + "[grid]\nouter-lr = [1000.0, 0.0]\n")
    (cell, _) = sorted(expand_grid(__import__("tomllib").loads(grid.read_text())), key=lambda c: -c["outer-lr"])
    run_dir, _ = run_inprocess({**cell, "output-dir": str(tmp_path / "cells"), "run-name": cell_id(cell)}, workers=0)
    records = Path(run_dir) / "rounds.jsonl"
    out = tmp_path / "replay.json"
    args = ["experiments/afbo_replay.py", grid, "--strategy", "afbo", "--round", "4", "--out", out]
    _script(*args, "--seed", "0", "--records", records, "--watch", "0", "5")
    r = json.loads(out.read_text())
    assert (r["cell"], r["round"], r["seed"], r["records_checked"]) == (cell_id(cell), 4, 0, True)
    x = r["x"]
    assert x["stable_below"] == pytest.approx(np.log(4.0)) and x["above_bound"] == 0
    assert len(x["largest"]) == 5 and x["largest"] == sorted(x["largest"], reverse=True)
    assert x["mean"] < x["largest"][0] and x["std"] > 0  # the upper level moved x off x_0 (all equal)
    assert set(r["watched"]) == {"0", "5"} and max(r["watched"].values()) <= x["largest"][0]
    refusals = ((["--seed", "5", "--round", "4"], "0 cells"), (["--seed", "0", "--round", "0"], "--round must be >= 1"),
                (["--seed", "0", "--round", "4", "--watch", str(x["n"])], "--watch: x has"))
    for bad, says in refusals:
        res = subprocess.run([sys.executable, *map(str, args[:4]), *bad, "--out", out], cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
        assert res.returncode != 0 and says in res.stderr, res.stderr[-500:]
    lines = records.read_text().splitlines()
    first = json.loads(lines[2])
    first["test_loss"] *= 1.001
    records.write_text("\n".join([*lines[:2], json.dumps(first), *lines[3:]]) + "\n")
    res = subprocess.run([sys.executable, *map(str, args), "--seed", "0", "--records", records], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode != 0 and "differ" in res.stderr


_STABLE = """
import json, numpy as np
from afbo_verdict import setting_summary
def run(key, seed, acc, diverged=0):
    c = np.array([0.0, 1.0, 2.0])
    return {"setting": "s", "method": key, "strategy": key.split(":")[0], "key": key, "seed": seed,
            "cell": f"{key}{seed}", "status": "ok", "diverged": diverged, "clock": c, "acc": np.array([0.1, acc, acc]),
            "loss": np.array([2.0, 1.0, 1.0]), "auc": np.full(3, np.nan), "spread": np.full(3, np.nan)}
runs = [run("afbo", 0, 0.80), run("fednest", 0, 0.70), run("afbo", 1, 0.30, diverged=1), run("fednest", 1, 0.75),
        run("afbo", 2, 0.90), run("fednest", 2, 0.60, diverged=1), run("afbo", 3, 0.85), run("fednest", 3, 0.65)]
print(json.dumps(setting_summary(runs, 0.5, 0.9)["paired"]["afbo_minus_fednest"]))
"""


def test_afbo_verdict_reads_the_gaps_also_over_the_seeds_where_neither_run_diverged():
    """acc_at_T_stable pairs only the seeds where neither run of the pair diverged (seeds 0 and 3 here: A diverged
    on 1, B on 2); the pre-registered acc_at_T keeps every seed."""
    env = _experiments_env()
    p = json.loads(_script("-c", _STABLE, env=env))
    assert p["acc_at_T"][2] == 4 and p["acc_at_T"][0] == pytest.approx((0.10 - 0.45 + 0.30 + 0.20) / 4)
    assert p["acc_at_T_stable"][2] == 2 and p["acc_at_T_stable"][0] == pytest.approx(0.15)


def test_afbo_plot_reads_the_evaluated_records_of_a_run_with_eval_every(tmp_path):
    """A run with eval-every = 3 (x_0, every third update and the last evaluated): the curves are its evaluated
    records, no NaN from the skipped ones; the replies of every record still count in the communication axis."""
    run_inprocess({**TINY, "engine": "async", "strategy": "afbo", "num-rounds": 8, "seed": 0, "outer-lr": 10.0,
                   "eval-every": 3, "output-dir": str(tmp_path / "cells"), "run-name": "afbo"}, workers=0)
    code = ("import json, sys; from pathlib import Path; from afbo_plot import read_cells; (c,) = read_cells([Path("
            "sys.argv[1])]); print(json.dumps([c['steps'].tolist(), c['acc'].tolist(), c['comm'].tolist()]))")
    env = _experiments_env()
    steps, acc, comm = json.loads(_script("-c", code, tmp_path, env=env))
    assert steps == [0, 3, 6, 8] and all(np.isfinite(acc))
    recs = [json.loads(line) for line in (tmp_path / "cells" / "afbo" / "rounds.jsonl").read_text().splitlines()]
    assert comm[-1] == sum(r["participants"] for r in recs) / TINY["num-clients"]


_CEILING = """
import json, numpy as np
from afbo_ceiling import prefix_gap, setting_reading
from afbo_verdict import curve_of, level, quarter_gain
rng = np.random.default_rng(0)
c = np.linspace(0.0, 100.0, 201)
def run(key, seed, acc):
    return {"setting": "s", "method": key, "strategy": key, "key": key, "seed": seed, "cell": f"{key}{seed}",
            "status": "ok", "diverged": 0, "clock": c, "acc": acc, "loss": 1 - acc, "auc": acc, "spread": np.nan * c}
flat = [0.89 + 0.001 * rng.standard_normal(c.size) for _ in range(5)]
rising = [0.88 + 0.0001 * c + 0.001 * rng.standard_normal(c.size) for _ in range(5)]
def head(r, n):
    return dict(r, clock=c[:n], acc=r["acc"][:n], loss=r["loss"][:n], auc=r["auc"][:n])
out = {"gain_flat": [quarter_gain(c, a) for a in flat], "gain_rising": [quarter_gain(c, a) for a in rising],
       "level": level(c, np.where(c >= 75, 1.0, 0.0)), "prefix_same": prefix_gap(run("f", 0, rising[0]),
                                                                               head(run("f", 0, rising[0]), 100)),
       "curves": [curve_of(v) for v in ([0.0005, 0.0004, 5], [0.002, 0.001, 5], [0.0005, 0.001, 5])]}
long = [run("fednest", s, rising[s]) for s in range(5)]
base = [head(run("fednest", s, rising[s]), 101) for s in range(5)]
base += [run("afbo", s, flat[s]) for s in range(5)]
clean = [dict(run("fednest:control", s, 0.92 + 0.001 * rng.standard_normal(c.size)), auc=np.nan * c) for s in range(5)]
S = setting_reading(long, base, "b", 0.895, 0.9, clean)
out["S"] = {k: S["methods"][k]["curve"] for k in S["methods"]}
out["room"] = [S["paired"]["clean_minus_afbo"]["level_acc"], S["paired"]["clean_minus_fednest_long"]["level_acc"]]
out["gap"] = S["paired"]["fednest_long_minus_afbo"]["level_acc"]
base[0] = dict(base[0], acc=base[0]["acc"] + 1e-6)
try:
    setting_reading(long, base, "b", 0.895, 0.9)
    out["refused"] = False
except SystemExit as e:
    out["refused"] = "does not repeat" in str(e)
print(json.dumps(out))
"""


def test_afbo_ceiling_rule_level_and_the_long_runs_extending_their_verdict_runs():
    """experiments/afbo_ceiling.py: the gain per quarter from the last half's slope (0 for a flat curve, slope x T/4
    for a line), the level over the last quarter, the rule's three answers, the clean-label control's room above
    each method, and a long run refused unless it repeats its verdict run record for record."""
    o = json.loads(_script("-c", _CEILING, env=_experiments_env()))
    assert all(abs(g) < 0.0005 for g in o["gain_flat"])
    assert all(g == pytest.approx(0.0025, abs=0.0005) for g in o["gain_rising"])  # 1e-4 per s x 100 s / 4
    assert o["level"] == 1.0 and o["prefix_same"] == 0.0
    assert o["curves"] == ["stopped", "rising", "undecided"]
    assert o["S"] == {"fednest_long": "rising", "fednest": "rising", "afbo": "stopped", "clean": "stopped"}
    # the clean-label level minus each method's level over the last quarter, paired by seed
    assert o["room"][0][0] == pytest.approx(0.03, abs=0.001)
    assert o["room"][1][0] == pytest.approx(0.92 - 0.88 - 0.0001 * 87.5, abs=0.001)
    assert o["gap"][0] == pytest.approx(0.88 + 0.0001 * 87.5 - 0.89, abs=0.001) and o["gap"][2] == 5
    assert o["refused"]
