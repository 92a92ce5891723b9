"""The report scripts of experiments/ on small runner output or hand-written results.csv files: fig2_plot.py,
table1_report.py, fedrzo_fig1_plot.py, fedrzo_fig2_plot.py, table1_tuning_report.py, copy_cells.py and
zohfl_variants_report.py, run as the docs run them (python experiments/NAME.py from the repository)."""
import csv
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from zofl.compare import cell_id, expand_grid, main
from zofl.results import read_rounds
from zofl.study import pack

ROOT = Path(__file__).resolve().parents[2]  # the repository


def test_fig2_and_table1_scripts_run_on_runner_output(tmp_path):
    grid = tmp_path / "fig2.toml"
    grid.write_text('[fixed]\nstrategy = "zohfl"\nnum-rounds = 2\nnum-clients = 3\n'
                    '[grid]\nsettings = [{alpha = 1000.0, beta = 0.9}, {alpha = 0.1, beta = 0.1}]\ntau = [2.0, 20.0]\n'
                    'seed = [0, 1]\n')
    out = tmp_path / "out"
    main([str(grid), "--out", str(out), "--via", "inprocess", "--parallel", "1"])
    subprocess.run([sys.executable, str(ROOT / "experiments" / "fig2_plot.py"), str(out)], check=True)
    assert (out / "fig2_digits.png").stat().st_size > 10_000
    loss = (out / "fig2_loss.md").read_text()  # tau 2 against tau 20, paired over the two seeds
    assert "| digits (1000, 90%) | 2 | " in loss and loss.count("(n=2) | ") >= 4
    assert "| digits (0.1, 10%) | 20 | " in loss
    report = subprocess.run([sys.executable, str(ROOT / "experiments" / "table1_report.py"), str(out),
                             "--against", str(out)], check=True, capture_output=True, text=True).stdout
    assert "0 of 36 method cells finished" in report and "| - | - | 90.82 |" in report  # digits: not Table I
    assert "| - f1 only | - server SGD | - ceiling | - ZO-HFL | - out (last 10%) |" in report
    assert "| - | - | - |" in report
    # the controls: drawn and paired by fig2_plot.py --controls, and in table1_report.py's --summary table
    cgrid = tmp_path / "controls.toml"
    cgrid.write_text('[fixed]\nnum-rounds = 2\nnum-clients = 3\n'
                     '[grid]\nstrategy = ["x0-only", "f1-only"]\nseed = [0, 1]\n')
    ctrl = tmp_path / "ctrl"
    main([str(cgrid), "--out", str(ctrl), "--via", "inprocess", "--parallel", "1"])
    subprocess.run([sys.executable, str(ROOT / "experiments" / "fig2_plot.py"), str(out), "--controls", str(ctrl)],
                   check=True)
    loss = (out / "fig2_loss.md").read_text()
    assert "ZO-HFL - f1-only, paired" in loss
    assert "| digits: *f1-only* | | " in loss and "| digits: *x0-only* | | " in loss
    assert all(line.count("(n=2)") >= 2 for line in loss.splitlines()
               if line.startswith("| digits (0.1, 10%) | 2 |"))
    summary = subprocess.run([sys.executable, str(ROOT / "experiments" / "table1_report.py"), str(out), "--controls",
                              str(ctrl), "--summary", "--datasets", "digits"],
                             check=True, capture_output=True, text=True).stdout
    lines = {line.split(" | ")[0]: line for line in summary.splitlines()}
    assert "digits (1000, 90%) | digits (0.1, 10%) |" in summary
    assert lines["| ZO-HFL adds"].count(" +- ") == 2 and lines["| *x_0 only*"].count(" +- ") == 2


def test_fedrzo_fig2_script_runs_on_runner_output(tmp_path):
    outs = []
    for task in ("hyper-logistic", "fair-relu"):
        # the hyperparameter study also has the control with x at x-min, and H = 2 at a second gamma
        floor = (", {local-steps = 0, tau = 0.0, hyper-x0 = 0.001}, {local-steps = 2, zo-lr = 0.01}"
                 if task == "hyper-logistic" else "")
        grid = tmp_path / f"{task}.toml"
        grid.write_text(f'[fixed]\nstrategy = "fedrzo-bl"\ntask = "{task}"\nnum-rounds = 2\nnum-clients = 3\n'
                        'beta = 1.0\nlower-rounds = 1\nzo-lr = 0.001\neta = 0.01\n'
                        f'[grid]\nsteps = [{{local-steps = 0, tau = 0.0}}, {{local-steps = 2}}{floor}]\n'
                        'seed = [0, 1]\n')
        outs.append(tmp_path / task)
        main([str(grid), "--out", str(outs[-1]), "--via", "inprocess", "--parallel", "1"])
    res = subprocess.run([sys.executable, str(ROOT / "experiments" / "fedrzo_fig2_plot.py"), *map(str, outs)],
                         check=True, capture_output=True, text=True)
    assert (outs[0] / "fig2_left.png").stat().st_size > 10_000 and (outs[1] / "fig2_right.png").exists()
    hyper, fair = res.stdout.split("fig2_right.png")
    assert "| 0 | 2 | 6 |" in fair and "| 2 | 2 | 6 |" in fair  # H, seeds, 2 * (2 * 1 + 1) rounds
    # the hyperparameter study: a line per (H, gamma), each H paired with the next smaller at its gamma, and the
    # control with x fixed at x-min a row of its own with every other line paired against it
    assert "| 2, gamma 0.001 | 2 | 6 |" in hyper and "| 2, gamma 0.01 | 2 | 6 |" in hyper
    assert "| 2, gamma 0.001 - 0 | " in hyper and "| 2, gamma 0.01 - 0 | " in hyper
    assert "| 0, x at x-min (control) | 2 | 6 |" in hyper and "| 2, gamma 0.01 - x at x-min (control) | " in hyper
    assert hyper.count(" - x at x-min (control) | ") == 3 and " - x at x-min" not in fair


def test_fedrzo_fig1_script_draws_the_committed_study(tmp_path):
    """experiments/fedrzo_fig1_plot.py on a copy of the committed Fig. 1 study (packed records) and its controls."""
    out = tmp_path / "fig1"
    shutil.copytree(ROOT / "docs" / "results" / "fig1_fedrzo", out, ignore=shutil.ignore_patterns("*.png"))
    subprocess.run([sys.executable, str(ROOT / "experiments" / "fedrzo_fig1_plot.py"), str(out), "--controls",
                    str(ROOT / "docs" / "results" / "fig1_fedrzo_controls")], check=True, capture_output=True)
    assert (out / "fig1.png").stat().st_size > 100_000


def test_fedrzo_compare_report_picks_and_compares(tmp_path):
    """experiments/fedrzo_compare_report.py at its smallest: a 2-round grid on the embedded digits (FedRZO_nn on
    the ReLU network, FedAvg on the softplus one at two steps, x_0 alone on both), --picks and the comparison."""
    grid = tmp_path / "g.toml"
    grid.write_text('[fixed]\ndataset = "digits"\nnum-rounds = 2\nnum-clients = 2\nbeta = 1.0\nlocal-steps = 2\n'
                    'x0 = "pretrained"\nx0-epochs = 0\n[grid]\nmethod = [\n'
                    '  {strategy = "fedrzo-nn", task = "relu-net", zo-lr = 0.01},\n'
                    '  {strategy = "fedavg", task = "softplus-net", local-lr = 0.1},\n'
                    '  {strategy = "fedavg", task = "softplus-net", local-lr = 0.3},\n'
                    '  {strategy = "x0-only", task = "relu-net"},\n'
                    '  {strategy = "x0-only", task = "softplus-net"},\n]\n'
                    'seed = [0, 1]\n')
    main([str(grid), "--out", str(tmp_path / "out"), "--via", "inprocess", "--parallel", "1"])
    script = str(ROOT / "experiments" / "fedrzo_compare_report.py")
    picks = subprocess.run([sys.executable, script, "--picks", str(tmp_path / "out")], check=True,
                           capture_output=True, text=True).stdout
    assert "| fedavg | local-lr | 0.1: " in picks and "; 0.3: " in picks and "| fedrzo-nn | zo-lr | 0.01: " in picks
    out = subprocess.run([sys.executable, script, str(tmp_path / "out")], check=True, capture_output=True,
                         text=True).stdout
    assert "## N1 = 4 hidden units" in out and "| FedRZO_nn (ReLU, zeroth-order) | " in out
    assert "| *x_0 alone (softplus)* | " in out and "| *x_0 alone (ReLU)* | " in out


def test_table1_tuning_picks_the_best_complete_group_and_writes_a_valid_grid(tmp_path):
    """experiments/table1_tuning_report.py: a group with all 4 configurations gets the best by last-10%
    accuracy, an incomplete group none; the grid it writes expands to the picks times the seeds."""
    cols = ["cell", "strategy", "dataset", "alpha", "beta", "seed", "gamma", "local-lr", "server-lr",
            "last10_test_acc", "final_test_acc", "best_test_acc", "x0_test_acc"]
    rows = [["c", "fedavg", "mnist", 1.0, 0.5, 100, "", lr, slr, acc, acc, acc, 0.8]
            for (lr, slr), acc in zip([(0.1, 0.5), (0.1, 1.0), (0.3, 0.5), (0.3, 1.0)], [0.90, 0.93, 0.91, 0.92])]
    rows += [["c", "zohfl", "mnist", 1.0, 0.5, 100, g, "", "", 0.89, 0.89, 0.89, 0.8] for g in (0.003, 0.01, 0.03)]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        csv.writer(f).writerows([cols, *rows])
    toml = tmp_path / "tuned.toml"
    md = subprocess.run([sys.executable, str(ROOT / "experiments" / "table1_tuning_report.py"), str(tmp_path),
                         "--toml", str(toml)], check=True, capture_output=True, text=True).stdout
    assert "| FedAvg | local-lr 0.1, server-lr 1 | **93.00** |" in md
    assert "| ZO-HFL | pending (3 of 4 finished) |" in md and "1 of 24 groups picked" in md
    cells = expand_grid(tomllib.loads(toml.read_text()))
    assert len(cells) == 3 and {c["seed"] for c in cells} == {0, 1, 2}
    assert all(c["strategy"] == "fedavg" and c["local-lr"] == 0.1 and c["server-lr"] == 1.0
               and c["num-rounds"] == 500 and "seed" in c for c in cells)
    # a grid that tunes only some methods (experiments/table1_tuning_small.toml) lists only those
    md = subprocess.run([sys.executable, str(ROOT / "experiments" / "table1_tuning_report.py"), str(tmp_path),
                         "--grid", str(ROOT / "experiments" / "table1_tuning_small.toml")],
                        check=True, capture_output=True, text=True).stdout
    assert "ZO-HFL" not in md and "| FedAvg | pending (0 of 12 finished) |" in md and "0 of 6 groups picked" in md


def test_copy_cells_copies_only_the_grids_finished_cells(tmp_path):
    """experiments/copy_cells.py: a widened grid starts from the finished cells of an earlier folder it shares."""
    grid = tmp_path / "g.toml"
    grid.write_text('[fixed]\nnum-rounds = 2\n[grid]\nstrategy = ["fedavg", "scaffold"]\nseed = [0, 1]\n')
    cells = expand_grid(tomllib.loads(grid.read_text()))
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "cells" / cell_id(cells[0])).mkdir(parents=True)
    (old / "cells" / cell_id(cells[0]) / "summary.json").write_text("{}")
    (old / "cells" / cell_id(cells[1])).mkdir()  # unfinished: not copied
    (old / "cells" / "other-cell").mkdir()  # not in the grid: not copied
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "copy_cells.py"), str(grid), str(old), str(new)],
                         check=True, capture_output=True, text=True).stdout
    assert sorted(p.name for p in (new / "cells").iterdir()) == [cell_id(cells[0])]
    assert "copied 1 finished cells" in out and "3 left to run" in out
    # a packed OLD: the copied cell gets its records back as rounds.jsonl, exactly
    recs = [{"round": 0, "test_acc": 0.5}, {"round": 1, "test_acc": 0.75, "sampled": [1]}]
    c2 = old / "cells" / cell_id(cells[2])
    c2.mkdir()
    (c2 / "summary.json").write_text("{}")
    (c2 / "config.json").write_text("{}")
    (c2 / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    pack(old, remove=True)
    subprocess.run([sys.executable, str(ROOT / "experiments" / "copy_cells.py"), str(grid), str(old), str(new)],
                   check=True, capture_output=True, text=True)
    assert read_rounds(new / "cells" / cell_id(cells[2]), check_order=False) == recs
    assert (new / "cells" / cell_id(cells[2]) / "rounds.jsonl").is_file()


def test_table1_report_pairs_against_the_most_seeded_sgd_step(tmp_path):
    """experiments/table1_report.py: '- server SGD' / '- ceiling' use, of a control's steps, the one run with the most
    seeds; '- ZO-HFL' pairs a baseline with ZO-HFL of the same cell and seed (logic only: hand-written results.csv)."""
    cols = ["cell", "strategy", "dataset", "alpha", "beta", "seed", "local-lr", "gamma", "x0_test_acc",
            "final_test_acc", "best_test_acc", "last10_test_acc", "wall_s", "local_steps"]

    def write(d: Path, rows: list[tuple]) -> None:
        d.mkdir()
        with open(d / "results.csv", "w", newline="") as f:
            w = csv.DictWriter(f, cols)
            w.writeheader()
            for i, (s, seed, lr, acc) in enumerate(rows):
                w.writerow({"cell": f"c{i}", "strategy": s, "dataset": "mnist", "alpha": 1.0, "beta": 0.5, "seed": seed,
                            "local-lr": lr, "gamma": 0.01, "x0_test_acc": 0.5, "final_test_acc": acc,
                            "best_test_acc": acc, "last10_test_acc": acc, "wall_s": 1, "local_steps": 0})

    write(tmp_path / "runs", [("fedavg", 0, 0.1, 0.90), ("fedavg", 1, 0.1, 0.92),
                              ("zohfl", 0, 0.1, 0.85), ("zohfl", 1, 0.1, 0.86)])
    write(tmp_path / "ctrl", [("server-sgd", 0, 0.1, 0.88), ("server-sgd", 1, 0.1, 0.89),  # 2 seeds: the reference
                              ("server-sgd", 0, 1.0, 0.99),  # 1 seed, higher: not the reference
                              ("centralised", 0, 0.3, 0.95), ("centralised", 1, 0.3, 0.95)])
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "table1_report.py"), str(tmp_path / "runs"),
                          "--controls", str(tmp_path / "ctrl"), "--datasets", "mnist"],
                         check=True, capture_output=True, text=True).stdout
    fedavg = next(line for line in out.splitlines() if line.startswith("| FedAvg | mnist | 91.00"))
    cells = [c.strip() for c in fedavg.strip("|").split("|")]
    assert cells[7].startswith("2.50 +- ") and cells[7].endswith("(n=2)")  # - server SGD: (2 + 3) / 2
    assert cells[8].startswith("-4.00 +- ")  # - ceiling: (-5 - 3) / 2
    assert cells[9].startswith("5.50 +- ")  # - ZO-HFL: (5 + 6) / 2
    # a grid of cells whose dataset is in [fixed] (experiments/table1_zeros_cifar.toml): the steps table reads it there
    grid = tmp_path / "g.toml"
    grid.write_text('[fixed]\ndataset = "mnist"\n[grid]\ncell = [{alpha = 1.0, beta = 0.5, strategy = "fedavg", '
                    'local-lr = 0.1}]\nseed = [0, 1]\n')
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "table1_report.py"), str(tmp_path / "runs"),
                          str(grid), "--controls", str(tmp_path / "ctrl"), "--datasets", "mnist"],
                         check=True, capture_output=True, text=True).stdout
    assert "| FedAvg | mnist | 1 | 0.5 | local-lr 0.1 |" in out


def test_zohfl_variants_report_pairs_against_the_best_f1_only(tmp_path):
    """experiments/zohfl_variants_report.py: 'vs the best f1-only' pairs a variant with the f1-only control of
    the same x_0 whose gamma has the highest mean, not only with the control at the variant's own gamma
    (logic only: hand-written results.csv)."""
    cols = ["cell", "strategy", "seed", "directions", "estimator", "gamma", "x0", "last10_test_acc", "local_steps"]
    runs = [("f1-only", "", 0.1, (0.82, 0.83)), ("f1-only", "", 1.0, (0.80, 0.81)),
            ("zohfl", "envelope", 1.0, (0.825, 0.835))]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for s, est, gamma, accs in runs:
            for seed, acc in enumerate(accs):
                w.writerow({"cell": f"{s}-{gamma}-{seed}", "strategy": s, "seed": seed, "directions": 1,
                            "estimator": est, "gamma": gamma, "x0": "pretrained", "last10_test_acc": acc,
                            "local_steps": 0})
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "zohfl_variants_report.py"), str(tmp_path)],
                         check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert "The best f1-only (the highest mean on these seeds): f1-only gamma 0.1 (82.50 +- " in out
    row = next(line for line in out.splitlines() if line.startswith("| (b+c) envelope estimate, gamma 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("2.50 +- ")  # vs f1-only at gamma 1: (2.5 + 2.5) / 2
    assert cells[3].startswith("0.50 +- ")  # vs the best f1-only (gamma 0.1): (0.5 + 0.5) / 2
    assert (tmp_path / "variants.md").read_text().strip() == out.strip()
    # --best-f1: the best control picked elsewhere (held-out seeds), not on the seeds reported
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "zohfl_variants_report.py"), str(tmp_path),
                          "--best-f1", "pretrained=1.0"], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert "The best f1-only (picked on seeds 0-4): f1-only gamma 1 (" in out
    row = next(line for line in out.splitlines() if line.startswith("| (b+c) envelope estimate, gamma 1 |"))
    assert [c.strip() for c in row.strip("|").split("|")][3].startswith("2.50 +- ")


def test_the_summary_quotes_its_reports():
    """Every interval the summary's speed, FedRZO and verdict bullets quote is in a report (table1_speed.md is
    what its script prints from the committed records: test_run_all.py), and the summary table is
    table1_summary.md's."""
    summary = (ROOT / "docs" / "results" / "README.md").read_text()
    reports = "".join((ROOT / "docs" / "results" / f).read_text() for f in (
        "table1_speed.md", "table1_tuned_small.md", "table1_tuned_seeds5.md", "table1_tuned_cifar_wide.md",
        "fedrzo_compare/compare.md"))
    start = summary.index("- **Speed**")
    bullets = summary[start:summary.index("```", start)]
    quoted = re.findall(r"[+-]?(\d+\.\d\d) \+- (\d+\.\d\d)", bullets)
    assert len(quoted) >= 10
    for mean, half in quoted:
        assert re.search(rf"-?{re.escape(mean)} \+- {re.escape(half)}", reports), f"{mean} +- {half} is in no report"
    head = summary.index("## One-screen summary")
    table = [ln for ln in summary[head:summary.index("\n\n- ", head)].splitlines()
             if ln.startswith("| ") and " +- " in ln]
    # Table I's rows, the speed rows it gains and the FedRZO comparison's table, each a page's own lines
    pages = {f: (ROOT / "docs" / "results" / f).read_text().splitlines() for f in (
        "table1_summary.md", "table1_speed_summary.md", "fedrzo_compare/summary.md")}
    assert [sum(ln in lines for ln in table) for lines in pages.values()] == [12, 7, 10]
    assert all(any(ln in lines for lines in pages.values()) for ln in table)
