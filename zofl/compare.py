"""The strategy-comparison runner: a grid of runs through the Flower simulation, resumable.

    python -m zofl.compare GRID.toml --out DIR [--parallel 2] [--via flower|inprocess|ray [--address ADDR]]
                           [--set key=value ...]

GRID.toml:

    [fixed]                       # run-config keys for every cell
    num-rounds = 500
    data-dir = "~/data"
    [grid]                        # each list is a dimension of the grid (any run-config key)
    strategy = ["zohfl", "fedavg"]
    dataset = ["mnist", "fashion_mnist"]
    seed = [0, 1]
    settings = [{alpha = 1000.0, beta = 0.9}, {alpha = 1.0, beta = 0.5}]   # keys that vary together
    [strategy.fedavg]             # keys for the cells of one strategy only (e.g. tuned steps)
    local-lr = 0.05
    [report]                      # optional: the keys that make the table's columns / plot panels
    columns = ["dataset", "alpha", "beta"]
    paired = ["tau=5,20"]         # optional: paired differences A - B over the same seeds (paired.md)

Every cell is one run; its folder DIR/cells/<id> (id = a hash of its run-config) holds the usual
config.json, rounds.jsonl, summary.json. A cell with a summary.json whose config.json agrees with
the cell on every key its strategy reads (zofl.methods.READ_BY) is finished and skipped, so an
interrupted grid continues where it stopped (an unfinished cell starts again; one runner per DIR at a
time: a second is refused, since it would restart the cells the first is writing). After each cell
DIR/results.csv (one row per cell: x_0's, the final, best and last-10%-mean test accuracy),
DIR/rounds.parquet (every round of every cell beside its config, zofl.packed; ``pandas.read_parquet``
opens it), DIR/table.md (final, last-10%-mean and best test
accuracy: mean +- 95% t interval and n over seeds; x_0's accuracy), DIR/paired.md (the [report]
paired comparisons) and DIR/plots/*.png (test accuracy and
loss per round, one plot per dataset and setting) are rewritten. ``--parallel 2`` runs two cells at
once, each on its own SuperLink with one Ray CPU, so both cores stay busy.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import itertools
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import threading
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any

from .config import KEY_BY_NAME, ConfigError, clients_per_node, config_warnings, parse_config, parse_set
from .core.record import evaluated, last_evaluated
from .core.shares import num_nodes
from .figures import save as save_figure
from .inprocess import run_inprocess
from .launch import die_with_parent, local_ray_cluster, local_superlink, one_blas_thread
from .methods import METHODS, reads
from .results import FolderBusy, lock_folder, read_rounds, read_run_json, unlock_folder
from .safeio import GRID_CAP, FileRefused, load_toml, read_user_bytes
from .setup import check_run
from .stats import fmt_interval, interval, paired, run_figures, t_quantile
from .study import pack
from .tasks.base import SplitTask, pooled_of
from .tasks.data import DataError, check_file

REPORT_EVERY_S = 60.0
CELL_KEYS = ("strategy", "dataset", "alpha", "beta", "seed")  # how results are grouped and labelled


def expand_grid(spec: dict[str, Any], overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """All cells (run-configs) of a grid spec, in a stable order, each validated as far as a run can be
    without reading data (``zofl.setup.check_run``: the run-config, the task, the method's own rules),
    so a grid with one bad cell stops before any cell runs; the ConfigError names the cell."""
    check_sections(spec)
    fixed = dict(spec.get("fixed", {}))
    grid = dict(spec.get("grid", {}))
    per_strategy = spec.get("strategy", {})
    dims = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid file: [grid] {key} must be a non-empty list")
        refuse_repeats(key, values)
        if all(isinstance(v, dict) for v in values):  # e.g. settings: keys that vary together
            if key in KEY_BY_NAME:
                raise ConfigError(f"grid file: [grid] {key} is a run-config key, so it lists its values, not "
                                  f"tables (keys that vary together go under another name, e.g. settings = [{{...}}])")
            empty = [i + 1 for i, v in enumerate(values) if not v]
            if empty:
                raise ConfigError(f"grid file: [grid] {key} entry {empty[0]} is an empty table: it sets no key")
            dims.append([dict(v) for v in values])
        else:
            dims.append([{key: v} for v in values])
    size = math.prod(len(d) for d in dims)
    if size > MAX_CELLS:
        raise ConfigError(f"grid file: [grid] makes {size:,} cells ({' x '.join(str(len(d)) for d in dims)}), more "
                          f"than {MAX_CELLS:,}; split the grid")
    combos = list(itertools.product(*dims))
    cells = []
    for i, combo in enumerate(combos):
        cell = dict(fixed)
        for part in combo:
            cell.update(part)
        cell.update(per_strategy.get(cell.get("strategy", "zohfl"), {}))
        cell.update(overrides or {})
        runner_keys = sorted({"output-dir", "run-name"} & set(cell))
        if runner_keys:  # each cell's folder is <--out>/cells/<cell id>: a grid's own value would be ignored
            raise ConfigError(f"grid file: {runner_keys} are set by the runner (--out DIR: DIR/cells/<cell id>); "
                              f"remove them from the grid")
        try:
            check_run({k: v for k, v in cell.items() if k not in ("output-dir", "run-name")})  # fail early
        except ConfigError as exc:
            where = json.dumps({k: v for part in combo for k, v in part.items()}, sort_keys=True)
            raise ConfigError(f"grid cell {i + 1} of {len(combos)} {where}: {exc}") from None
        cells.append(cell)
    refuse_same_cells(cells, combos)
    return cells


def _value_key(v: Any) -> Any:
    """A grid value as repeats are found: numbers by value (1 and 1.0 are one number to a run-config), true
    never equal to 1, tables whatever the order of their keys."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, dict):
        return ("table", tuple(sorted((k, _value_key(x)) for k, x in v.items())))
    if isinstance(v, list):
        return ("array", tuple(_value_key(x) for x in v))
    return (type(v).__name__, v)


def refuse_repeats(key: str, values: list[Any]) -> None:
    """A ConfigError naming the key and the value if a [grid] list holds a value twice: its cell would run
    twice (the second run failing on the first's folder) and count its seed twice in results.csv and table.md."""
    seen: dict[Any, int] = {}
    for j, v in enumerate(values):
        i = seen.setdefault(_value_key(v), j)
        if i != j:
            shown = json.dumps(v, sort_keys=True, default=str)
            raise ConfigError(f"grid file: [grid] {key} lists {shown[:200]} twice (values {i + 1} and {j + 1} of "
                              f"{len(values)}); each value of a grid key must differ")


def refuse_same_cells(cells: list[dict[str, Any]], combos: list[tuple[dict[str, Any], ...]]) -> None:
    """A ConfigError naming both cells if two cells are one run (one ``cell_id``, one folder): values of a
    [grid] key that [strategy.*], --set or another [grid] key overrides, or that differ only in keys that
    change no number (NOT_RESULTS)."""
    seen: dict[str, int] = {}
    for j, cell in enumerate(cells):
        i = seen.setdefault(cell_id(cell), j)
        if i != j:
            a, b = (json.dumps({k: v for part in combos[n] for k, v in part.items()}, sort_keys=True) for n in (i, j))
            raise ConfigError(f"grid cells {i + 1} and {j + 1} of {len(cells)} ({a[:200]} and {b[:200]}) are one run "
                              f"({cell_id(cell)}): what tells them apart is overridden ([strategy.*], --set, another "
                              f"[grid] key) or changes no number ({', '.join(NOT_RESULTS)}); remove the overlap")


MAX_CELLS = 100_000  # a grid's cells are listed (and each checked) before any runs: a typo must not make 10**20


def check_sections(spec: dict[str, Any]) -> None:
    """The grid file's sections are the tables the runner reads (a ConfigError naming the section)."""
    unknown = set(spec) - {"fixed", "grid", "strategy", "report"}
    if unknown:
        raise ConfigError(f"grid file: unknown sections {sorted(unknown)}; allowed: fixed, grid, strategy, report")
    for name in ("fixed", "grid", "strategy", "report"):
        if not isinstance(spec.get(name, {}), dict):
            raise ConfigError(f"grid file: {name} must be a table ([{name}]), got {type(spec[name]).__name__}")
    for name, section in spec.get("strategy", {}).items():
        if not isinstance(section, dict):
            raise ConfigError(f"grid file: strategy.{name} must be a table ([strategy.{name}]: keys for the cells "
                              f"of strategy {name!r}), got {type(section).__name__}")
    unknown = set(spec.get("report", {})) - {"columns", "paired"}
    if unknown:
        raise ConfigError(f"grid file: [report] has unknown keys {sorted(unknown)}; allowed: columns, paired")
    for key in ("columns", "paired"):
        value = spec.get("report", {}).get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"grid file: [report] {key} must be a list of strings, got {value!r}"[:300])
    bad = [c for c in spec.get("report", {}).get("columns", []) if c not in KEY_BY_NAME]
    if bad:
        raise ConfigError(f"grid file: [report] columns {bad} are not run-config keys")


def read_grid(path: str | os.PathLike) -> dict[str, Any]:
    """The grid file as a dict; a ConfigError in one line naming the file if it is missing, unreadable,
    not a regular file (a folder, a FIFO, /dev/zero), larger than GRID_CAP, nested deeper than
    zofl.safeio.MAX_DEPTH or not TOML (binary, a syntax error)."""
    p = Path(path).expanduser()
    try:
        spec = load_toml(read_user_bytes(p, GRID_CAP, "grid file").decode("utf-8"), str(p))
    except FileRefused as exc:
        raise ConfigError(f"grid file {exc}") from None
    except FileNotFoundError:
        raise ConfigError(f"grid file {p}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"grid file {p}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"grid file {p}: not text (TOML is UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"grid file {p}: not valid TOML: {exc}") from None
    if not spec:
        raise ConfigError(f"grid file {p}: empty (no [fixed], [grid] or [strategy.*] tables): nothing to run")
    return spec


def check_cell_data(cells: list[dict[str, Any]]) -> None:
    """Every cell's data files, read and checked once per file before any cell runs (``expand_grid``
    checks everything but the data): a corrupt file in the third cell must not wait for two cells to run.
    Only files (not the splits: a Dirichlet draw takes seconds per setting); tasks of their own data check
    it in their own run."""
    seen: set[tuple[str, str, bool]] = set()
    for i, cell in enumerate(cells):
        _, task, spec = check_run({k: v for k, v in cell.items() if k not in ("output-dir", "run-name")})
        key = (spec.dataset, spec.data_dir, spec.download)
        if not isinstance(task, SplitTask) or key in seen:
            continue
        seen.add(key)
        try:
            check_file(*key)
        except DataError as exc:
            raise ConfigError(f"grid cell {i + 1} of {len(cells)} (dataset {spec.dataset!r}): {exc}") from None


def data_fingerprints(cells: list[dict[str, Any]]) -> dict[str, str | None]:
    """Per cell id, the fingerprint of the data file its run reads on this machine (the part of data.json's
    fingerprint before the split's), or None for a task that gives none: what a cell run on another node
    (--via ray) must have read."""
    prints: dict[tuple, str | None] = {}
    out = {}
    for cell in cells:
        _, task, spec = check_run({k: v for k, v in cell.items() if k not in ("output-dir", "run-name")})
        split = isinstance(task, SplitTask)  # a task of its own data (a toy problem) gives none, whatever its spec
        key = (split, spec.dataset, spec.data_dir, spec.path, spec.read)
        if key not in prints:
            prints[key] = pooled_of(spec).fingerprint if split else None
        out[cell_id(cell)] = prints[key]
    return out


def grid_warnings(cells: list[dict[str, Any]]) -> list[str]:
    """The run-config warnings (``zofl.config.config_warnings``) of the grid's cells, each once, with
    how many cells it concerns: said before any cell runs (a cell run through Flower logs them only
    in its own output)."""
    seen: dict[str, int] = {}
    for cell in cells:
        for w in config_warnings(_full(cell)):
            seen[w] = seen.get(w, 0) + 1
    return [f"{w} ({n} of {len(cells)} cells)" for w, n in seen.items()]


# keys that change no number
NOT_RESULTS = ("data-dir", "download", "split-cache", "output-dir", "run-name", "client-wait-s", "checkpoint-every",
               "resume")


def cell_id(cell: dict[str, Any]) -> str:
    """<strategy>-<dataset>-<hash of the keys the grid sets, but for paths>: the same on every machine."""
    full = _full(cell)
    label = f"{full['strategy']}-{full['dataset']}"
    key = {k: v for k, v in cell.items() if k not in NOT_RESULTS}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return f"{label}-{digest}"


def _same_settings(cell: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether a finished run's stored config.json is this cell under today's defaults: every key the
    cell's strategy reads (zofl.methods.reads) agrees; a key the run did not know yet must be at its
    default."""
    full = _full(cell)
    for k, v in full.items():
        if k in NOT_RESULTS or not reads(full["strategy"], k):
            continue
        if (stored[k] != v) if k in stored else (v != KEY_BY_NAME[k].default):
            return False
    return True


def finished_dir(out: Path, cell: dict[str, Any]) -> Path | None:
    """The folder of a finished run of ``cell`` under today's settings, or None.

    A finished run filed under another name (an older id scheme) is found by its config.json and
    renamed; one whose settings differ (a default changed since) does not count."""
    d = out / "cells" / cell_id(cell)
    candidates = [d] + (sorted(p for p in (out / "cells").iterdir() if p != d) if (out / "cells").is_dir() else [])
    for c in candidates:
        if (c / "summary.json").exists() and (c / "config.json").exists() and \
                _same_settings(cell, read_run_json(c / "config.json")):
            if c != d:
                if d.exists():
                    shutil.rmtree(d)
                c.rename(d)
            return d
    return None


def _full(cell: dict[str, Any]) -> dict[str, Any]:
    return parse_config({k: v for k, v in cell.items() if k not in ("output-dir", "run-name")})


def report_columns(spec: dict[str, Any]) -> list[str]:
    """Keys whose values make the table's columns and the plots' panels ([report] columns)."""
    return list(spec.get("report", {}).get("columns", ["dataset", "alpha", "beta"]))


def report_paired(spec: dict[str, Any], extra: list[str] | None = None) -> list[str]:
    """Paired comparisons "KEY=A,B" of [report] paired and --paired, checked."""
    items = [*spec.get("report", {}).get("paired", []), *(extra or [])]
    for item in items:
        parse_paired(item)
    return items


def strategy_keys(spec: dict[str, Any]) -> set[str]:
    """Keys set by [strategy.*] sections (ignored when pairing strategies)."""
    return {k for section in spec.get("strategy", {}).values() for k in section}


def write_reports(out: Path, cells: list[dict[str, Any]], column_keys: list[str] | None = None,
                  paired: list[str] | None = None, per_strategy: set[str] | None = None) -> list[str]:
    """results.csv, rounds.parquet, table.md, paired.md and plots/ from the finished cells; returns the
    ids of the cells the failure policy stopped (listed in table.md, left out of every table).

    Table columns and plot panels are the grid's settings (``column_keys``, besides strategy and
    seed); rows and plot lines are the strategy with any other key that varies (e.g. a tuned step).
    ``paired``: comparisons "key=a,b" written to paired.md (see ``_paired``)."""
    finished, failed = [], []
    for cell in cells:
        d = finished_dir(out, cell)
        if d is not None:
            summary = read_run_json(d / "summary.json")
            if summary.get("status") == "failed":  # stopped by the failure policy: listed, not tabled
                failed.append((d.name, summary.get("failure")))
                continue
            finished.append((cell, d, summary, read_rounds(d)))
    varying = sorted({k for c in cells for k in c if len({json.dumps(x.get(k)) for x in cells}) > 1} - {"seed"})
    keys = list(dict.fromkeys([*CELL_KEYS, *varying]))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", *keys, "rounds", "x0_test_acc", "final_test_acc", "best_test_acc", "last10_test_acc",
                    "final_test_loss", "final_f1", "wall_s", "local_steps", "final_fed_acc", "final_fed_loss"])
        for cell, d, s, rec in finished:
            full = _full(cell)
            fig = run_figures(accuracies(rec))
            w.writerow([d.name, *[full[k] for k in keys], s["rounds"], rec[0]["test_acc"], s["final_test_acc"],
                        s["best_test_acc"], fig["last10"], s["final_test_loss"], last_evaluated(rec)["f1"],
                        round(s["total_wall_s"], 2), s["total_local_steps"],  # federated evaluation: empty if none
                        *("" if s.get(k) is None else s[k] for k in ("final_fed_acc", "final_fed_loss"))])
    if finished or failed:
        # rounds.parquet: every record of every cell in DIR, beside its config (zofl.packed)
        pack(out, known={d.name: rec for _, d, _, rec in finished})
    cols = [k for k in keys if k in (column_keys or ["dataset", "alpha", "beta"]) and k not in ("strategy", "seed")]
    rows = ["strategy", *[k for k in varying if k not in cols and k != "strategy"]]
    _table(out, finished, rows, cols, failed)
    if paired:
        _paired(out, finished, paired, varying, per_strategy or set())
    _plots(out, finished, rows, cols)
    return [name for name, _ in failed]


def _group_label(full: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={full[k]}" for k in keys)


def _row_label(cell: dict[str, Any], row_keys: list[str]) -> str:
    """strategy plus the row keys this cell sets itself (not the defaults it inherits)."""
    return ", ".join([f"strategy={_full(cell)['strategy']}", *[f"{k}={cell[k]}" for k in row_keys[1:] if k in cell]])


def federated_only(rec: list[dict[str, Any]]) -> bool:
    """Whether a run had no test set on the server (server-data = none): its accuracy is the clients' (federated)."""
    return bool(rec) and rec[0].get("test_acc") is None and any(r.get("fed_acc") is not None for r in rec)


def accuracies(rec: list[dict[str, Any]]) -> list[float]:
    """A run's test accuracy per record: on the server's test set (the records it evaluated: eval-every), or for a
    run without one the federated evaluation's (the rounds the clients evaluated)."""
    if federated_only(rec):
        return [r["fed_acc"] for r in rec if r.get("fed_acc") is not None]
    return [r["test_acc"] for r in rec if evaluated(r)]


FIGURES = (("final", "final round"), ("last10", "mean of the last 10% of rounds"), ("best", "best round"))


def _table(out: Path, finished, row_keys: list[str], col_keys: list[str],
           failed: list[tuple[str, str]] | None = None) -> None:
    rows: dict[str, dict[str, list[dict[str, float]]]] = {}
    start: dict[str, list[float]] = {}
    cols: list[str] = []
    federated = 0
    for cell, _, _, rec in finished:
        full = _full(cell)
        col = _group_label(full, col_keys)
        row = _row_label(cell, row_keys)
        cols.append(col) if col not in cols else None
        rows.setdefault(row, {}).setdefault(col, []).append(run_figures([100 * a for a in accuracies(rec)]))
        if federated_only(rec):
            federated += 1
        else:
            start.setdefault(col, []).append(100 * rec[0]["test_acc"])
    lines = ["Test accuracy (%): mean +- the half-width of the 95% t interval over seeds (n = number of seeds; "
             "n = 1: no interval). Per run: the final round, the mean of the last 10% of rounds, the best round.",
             *([f"{federated} run(s) had no test set on the server (server-data = none): theirs are the federated "
                f"evaluation's (the clients' held-out data, the rounds they evaluated)."] if federated else []),
             ""]
    for key, title in FIGURES:
        lines += [f"### {title}", "", "| strategy | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for row, vals in rows.items():
            lines.append(f"| {row} | " + " | ".join(fmt_interval(interval(v[key] for v in vals.get(col, [])))
                                                     for col in cols) + " |")
        lines.append("")
    lines += ["### round 0 (x_0, the start of every run of the column)", "",
              "| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols),
              "| x_0 | " + " | ".join(fmt_interval(interval(start.get(c, []))) for c in cols) + " |"]
    if failed:
        lines += ["", "### failed runs (stopped by the failure policy; not in the table)", "",
                  *[f"- {name}: {why}" for name, why in failed]]
    (out / "table.md").write_text("\n".join(lines) + "\n")


def parse_paired(item: str) -> tuple[str, Any, Any]:
    """ "tau=5,20" -> ("tau", 5, 20): the key and the two values to compare (A - B)."""
    key, _, values = item.partition("=")
    parts = values.split(",")
    if not key or len(parts) != 2:
        raise ConfigError(f"paired comparison {item!r}: expected KEY=A,B (e.g. tau=5,20 or strategy=zohfl,f1-only)")
    try:
        a, b = (load_toml(f"v = {v}", f"paired comparison {key.strip()!r}")["v"]
                if v.strip()[:1] in "0123456789-.[{\"" else v.strip() for v in parts)
    except (tomllib.TOMLDecodeError, KeyError):
        raise ConfigError(f"paired comparison {item!r}: A and B must be TOML values or bare words "
                          f"(e.g. tau=5,20 or strategy=zohfl,f1-only)") from None
    return key.strip(), a, b


def _paired(out: Path, finished, items: list[str], varying: list[str], per_strategy: set[str]) -> None:
    """paired.md: for each "key=a,b", the differences a - b over the seeds both settings have, per
    group of cells that agree on every other varying key (keys set by [strategy.*] sections are
    ignored when the key is ``strategy``)."""
    lines = ["Paired differences A - B over the seeds both have (same seed: same split, sampling and "
             "directions), test accuracy in points: mean +- the half-width of the 95% t interval (n). "
             "An interval that contains 0 is below the noise at this n.", ""]
    for item in items:
        key, a, b = parse_paired(item)
        ignore = {key, "seed"} | (per_strategy if key == "strategy" else set())
        groups: dict[str, dict[Any, dict[int, dict[str, float]]]] = {}
        for cell, _, _, rec in finished:
            full = _full(cell)
            if full[key] not in (a, b):
                continue
            g = _group_label(full, [k for k in varying if k not in ignore])
            groups.setdefault(g, {}).setdefault(full[key], {})[full["seed"]] = \
                run_figures([100 * a for a in accuracies(rec)])
        lines += [f"### {key}: {a} - {b}", "",
                  "| setting | " + " | ".join(f"A - B, {t}" for _, t in FIGURES) + " |", "|---|---|---|---|"]
        for g, by in groups.items():
            if a in by and b in by:
                diffs = [fmt_interval(paired({s: v[f] for s, v in by[a].items()},
                                             {s: v[f] for s, v in by[b].items()})) for f, _ in FIGURES]
                lines.append(f"| {g} | " + " | ".join(diffs) + " |")
        lines.append("")
    (out / "paired.md").write_text("\n".join(lines) + "\n")


def _plots(out: Path, finished, row_keys: list[str], col_keys: list[str]) -> None:
    """plots/<panel>.png: test accuracy (%) and test loss per round, a line per row of table.md (the
    strategy and the keys the grid varies besides the panel's and the seed), each the mean over its
    seeds with a band of the 95% t interval of that mean (none for n = 1), n in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from cycler import cycler

    groups: dict[str, dict[str, list[list[dict]]]] = {}
    for cell, _, _, rec in finished:
        full = _full(cell)
        panel = _group_label(full, col_keys)
        line = _legend_label(cell, row_keys)
        groups.setdefault(panel, {}).setdefault(line, []).append(rec)
    (out / "plots").mkdir(exist_ok=True)
    for panel, lines in groups.items():
        # the legend goes below the two panels, in as many rows as it needs (a study may draw 20+ lines),
        # and lines past 10 get tab20's colours, past 20 a dashed (past 40 a dotted) style as well
        ncol = 1 if len(lines) <= 3 else 2
        legend_in = 0.14 * (-(-len(lines) // ncol)) + 0.45
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2 + legend_in))
        if len(lines) > 10:
            for ax in axes:
                ax.set_prop_cycle(cycler(linestyle=["-", "--", ":"]) * cycler(color=plt.cm.tab20.colors))
        for line, runs in lines.items():  # grid order
            n = min(len(r) for r in runs)
            shown = [j for j in range(n) if any(evaluated(run[j]) for run in runs)]  # the server's evaluations
            rounds = [runs[0][j]["round"] for j in shown]
            for ax, key, scale in zip(axes, ("test_acc", "test_loss"), (100.0, 1.0)):
                vals = scale * np.array([[run[j][key] if run[j][key] is not None else np.nan for j in shown]
                                         for run in runs])
                mean = np.nanmean(vals, axis=0)
                drawn, = ax.plot(rounds, mean, label=f"{line} (n = {len(runs)})", linewidth=1.2)
                if len(runs) > 1:
                    half = t_quantile(len(runs)) * np.nanstd(vals, axis=0, ddof=1) / np.sqrt(len(runs))
                    ax.fill_between(rounds, mean - half, mean + half, color=drawn.get_color(), alpha=0.15, linewidth=0)
        for ax, label in zip(axes, ("test accuracy (%)", "test loss (the task's loss)")):
            ax.set_xlabel("round (a record: a round; an update for the asynchronous methods)")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=7, frameon=False)
        fig.suptitle(f"{panel or 'all cells'}: mean over seeds, bands = 95% t interval of the mean", fontsize=9)
        fig.tight_layout(rect=(0, legend_in / (4.2 + legend_in), 1, 1))
        name = panel.replace(", ", "_").replace("=", "") or "all"
        save_figure(fig, out / "plots" / f"{name}.png", dpi=110)
        plt.close(fig)


def _legend_label(cell: dict[str, Any], row_keys: list[str]) -> str:
    """A plot line's name: the method's title and the row keys this cell sets ("FedAvg, local-lr 0.05")."""
    strategy = _full(cell)["strategy"]
    title = METHODS[strategy].server.title if strategy in METHODS else strategy
    return ", ".join([title, *[f"{k} {cell[k]}" for k in row_keys[1:] if k in cell]])


def run_grid(cells: list[dict[str, Any]], out: Path, parallel: int = 1, via: str = "flower",
             progress: bool = True, column_keys: list[str] | None = None, address: str | None = None,
             share_ray: bool = False, **report) -> list[str]:
    """Run every unfinished cell; write the reports as cells finish (at most every REPORT_EVERY_S
    seconds) and at the end. Returns the ids of the cells
    that failed (an error, or stopped by the failure policy). Every cell's data files are checked first
    (``check_cell_data``), before the folder is made. ``address``: the Ray cluster of ``via`` "ray" (None: a
    Ray of this machine). ``share_ray`` True: with ``via`` "flower", each slot keeps one Ray runtime that its
    cells' simulations join instead of each starting a Ray of its own: measured 1.2x the cells per minute, but
    one cell in 48 failed without output (its ClientApp actors did not start within client-wait-s), so it is
    not the default (docs/benchmark-compare.md)."""
    check_cell_data(cells)
    out.mkdir(parents=True, exist_ok=True)
    with grid_lock(out):
        return _run_grid(cells, out, parallel, via, progress, column_keys, address, share_ray, **report)


@contextmanager
def grid_lock(out: Path):
    """Hold an exclusive flock on OUT/.lock while a runner works on OUT: a second runner on the same
    folder would take the cells the first is writing for interrupted ones and start them again
    (deleting them), so it is refused with a ConfigError before it touches anything."""
    try:
        fd = lock_folder(out)
    except FolderBusy as exc:
        raise ConfigError(f"--out {out}: another python -m zofl.compare is running on this folder (pid {exc.holder} "
                          f"holds {out / '.lock'}); wait for it to finish, or give another --out") from None
    try:
        yield
    finally:
        unlock_folder(fd)


def _run_grid(cells: list[dict[str, Any]], out: Path, parallel: int, via: str, progress: bool,
              column_keys: list[str] | None, address: str | None = None, share_ray: bool = False,
              **report) -> list[str]:
    from tqdm import tqdm

    todo = []
    for cell in cells:
        if finished_dir(out, cell) is not None:
            continue
        d = out / "cells" / cell_id(cell)
        if d.exists():
            shutil.rmtree(d)  # an interrupted (or outdated) cell starts again
        todo.append(cell)
    print(f"{len(cells)} cells, {len(cells) - len(todo)} already finished, {len(todo)} to run", flush=True)
    lock = threading.Lock()
    failures: list[str] = []
    bar = tqdm(total=len(todo), disable=not progress, desc="cells", file=sys.stdout)
    slots: list[Any] = []
    ray_cpus = max(1, (os.cpu_count() or 2) // parallel)  # each cell's Ray gets its share of the cores

    def run_cell(cell: dict[str, Any]) -> tuple[str, float, str]:
        cfg = {**cell, "output-dir": str(out / "cells"), "run-name": cell_id(cell)}
        t = time.perf_counter()
        with lock:
            sl = slots.pop()
        try:
            full = _full(cell)
            res = sl.run(cfg, num_supernodes=num_nodes(full.num_clients, clients_per_node(full)), cpus_per_client=1,
                         extra_federation_config="" if share_ray else f"init-args-num-cpus={ray_cpus}")
        finally:
            with lock:
                slots.append(sl)
        summary = out / "cells" / cell_id(cell) / "summary.json"
        failure = read_run_json(summary).get("failure") if summary.exists() else "no summary.json"
        return cell_id(cell), time.perf_counter() - t, "" if not failure else \
            f"{failure}\n{(res.stdout + res.stderr)[-2000:]}"

    with ExitStack() as stack:
        if via == "flower":
            for i in range(parallel):  # one after the other: what a slot starts dies with the thread that started it
                slots.append(stack.enter_context(_flower_slot(out / f".superlink-{i}", ray_cpus if share_ray else 0)))
            pool = stack.enter_context(ThreadPoolExecutor(parallel))
            results = (f.result() for f in as_completed([pool.submit(run_cell, c) for c in todo]))
        elif via == "ray" and not todo:  # nothing to run: no Ray to start or join
            results = iter(())
        elif via == "ray":  # each cell a Ray task on a cluster (zofl.ray_cells), its files written here
            from .ray_cells import ray_cell_result, run_on_ray

            prints = data_fingerprints(todo)
            (out / "cells").mkdir(exist_ok=True)
            if address is None:  # a Ray of this machine for the grid, stopped with it (SIGKILL too: launch's watchdog)
                address = stack.enter_context(local_ray_cluster(1, os.cpu_count() or 1)).address
            replies = stack.enter_context(closing(run_on_ray(
                [{**c, "output-dir": str(out / "cells"), "run-name": cell_id(c)} for c in todo], address)))
            results = (ray_cell_result(c, reply, out / "cells", prints[cell_id(c)]) for c, reply in replies)
        else:  # one spawned process per core, each running whole cells (reused: data stay loaded)
            stack.enter_context(one_blas_thread())  # read by the workers spawned below
            pool = stack.enter_context(ProcessPoolExecutor(parallel, mp_context=mp.get_context("spawn"),
                                                           initializer=die_with_parent, initargs=(os.getpid(),)))
            futures = [pool.submit(_inprocess_cell, {**c, "output-dir": str(out / "cells"), "run-name": cell_id(c)})
                       for c in todo]
            results = (f.result() for f in as_completed(futures))
        last_report = time.monotonic()
        for cid, secs, err, *where in results:  # where: the Ray node of a --via ray cell
            if err:
                failures.append(cid)
            with lock:
                bar.update(1)
                bar.write(f"{'done' if not err else 'FAILED'} {cid} in {secs:.0f}s" +
                          (f" on Ray node {where[0]}" if where else "") + (f"\n{err}" if err else ""))
                # the reports read every finished cell: at most once a minute (and at the end), or a grid
                # of hundreds of cells spends more time rewriting them than running cells
                if time.monotonic() - last_report > REPORT_EVERY_S:
                    write_reports(out, cells, column_keys, **report)
                    last_report = time.monotonic()
    bar.close()
    stopped = write_reports(out, cells, column_keys, **report)  # this time's and earlier policy stops
    return sorted(set(failures) | set(stopped))


@contextmanager
def _flower_slot(workdir: Path, ray_cpus: int):
    """A SuperLink for every cell the slot runs; with ``ray_cpus`` > 0 also a Ray runtime of that many CPUs that
    each cell's simulation joins (RAY_ADDRESS, read by Flower's ``ray.init``) instead of starting one
    (``run_grid``'s share_ray); 0: each cell's simulation starts its own Ray (the default)."""
    with ExitStack() as stack:
        env = {"RAY_ADDRESS": stack.enter_context(local_ray_cluster(1, ray_cpus)).address} if ray_cpus else {}
        yield stack.enter_context(local_superlink(workdir, extra_env=env))


def _inprocess_cell(cfg: dict[str, Any]) -> tuple[str, float, str]:
    """One cell with the in-process engine, inside a runner worker process."""
    import logging

    logging.getLogger("flwr").setLevel(logging.WARNING)
    t = time.perf_counter()
    try:
        run_inprocess(cfg, workers=0)
        return cfg["run-name"], time.perf_counter() - t, ""
    except Exception as exc:  # reported, the grid goes on
        return cfg["run-name"], time.perf_counter() - t, repr(exc)


EXIT_CONFIG = 2  # as zofl run: bad input, refused before any work


def _refuse(message: Any) -> None:
    """Bad input (grid file, --set, --out): one line on stderr, exit code 2, nothing run or written."""
    print(f"zofl compare: error: {message}", file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def _out_dir(text: str, must_exist: bool) -> Path:
    """--out as an absolute folder path (it may not exist yet, unless ``must_exist``); a ConfigError otherwise."""
    try:
        out = Path(text).expanduser().resolve()
    except (ValueError, OSError, RuntimeError) as exc:
        raise ConfigError(f"--out {text!r}: not a usable path ({exc})") from None
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a folder")
    if must_exist and not out.is_dir():
        raise ConfigError(f"--out {out}: no such folder (--report-only reads the finished cells there)")
    return out


def main(argv: list[str] | None = None, prog: str = "python -m zofl.compare") -> None:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.error = lambda message: _refuse(" ".join(message.split()))  # one line, as every other refusal
    ap.add_argument("grid", help="grid file (TOML)")
    ap.add_argument("--out", required=True, help="results folder (reused to resume)")
    ap.add_argument("--parallel", type=int, default=2, help="cells run at once (default 2: one per core)")
    ap.add_argument("--via", "--engine", dest="via", choices=("flower", "inprocess", "ray"), default="flower",
                    help="flower: flwr run on a local simulation SuperLink (default); inprocess: same code and "
                         "numbers on the App's in-process Grid, without Ray/SuperLink, for quick studies; ray: "
                         "each cell a task (in-process engine, same numbers) on the Ray cluster at --address, its "
                         "files written here. (The run-config key 'engine' -- sync, legacy, async -- is set like "
                         "any key: --set 'engine=\"legacy\"'; --engine is an old name of --via.)")
    ap.add_argument("--address", default=None, metavar="ADDR",
                    help="with --via ray: the Ray cluster's address (HOST:PORT of its head, as `ray start --head` "
                         "prints it; every node needs this zofl and the cells' data-dir); default: a Ray started "
                         "on this machine for the grid")
    ap.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                    help="run-config keys for every cell (repeatable)")
    ap.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    ap.add_argument("--report-only", action="store_true", help="rewrite the reports from finished cells")
    ap.add_argument("--paired", nargs="+", action="extend", default=[], metavar="KEY=A,B",
                    help="also report paired differences A - B over seeds in paired.md (e.g. tau=5,20 or "
                         "strategy=zohfl,f1-only); adds to the grid's [report] paired")
    args = ap.parse_args(argv)
    try:
        spec = read_grid(args.grid)
        cells = expand_grid(spec, parse_set(args.set))
        report = {"paired": report_paired(spec, args.paired), "per_strategy": strategy_keys(spec)}
        out = _out_dir(args.out, must_exist=args.report_only)
    except ConfigError as exc:
        _refuse(exc)
    for w in grid_warnings(cells):
        print(f"warning: {w}", file=sys.stderr)
    if args.dry_run:
        for c in cells:
            print(cell_id(c), json.dumps(c, sort_keys=True))
        return
    if args.report_only:
        try:
            write_reports(out, cells, report_columns(spec), **report)
        except ConfigError as exc:  # a cell's file that is not a run's (zofl.safeio, _read_json, read_rounds)
            _refuse(exc)
        return
    try:
        if args.address is not None and args.via != "ray":
            raise ConfigError("--address is for --via ray (the Ray cluster the cells run on)")
        failed = run_grid(cells, out, max(1, args.parallel), args.via, column_keys=report_columns(spec),
                          address=args.address, **report)
    except ConfigError as exc:
        _refuse(exc)
    if failed:
        sys.exit(f"{len(failed)} cell(s) failed: {', '.join(failed)} (see above and table.md)")


if __name__ == "__main__":
    main()
