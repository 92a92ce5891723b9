"""``zofl plot``: test accuracy and loss per round of run folders, one PNG (matplotlib, Agg).

The PNG's path and every folder are checked before anything is drawn: a folder that is no run, or
whose rounds.jsonl or config.json is not a run's (binary, torn, empty, wrong types), is refused with
a ValueError naming the file (the CLI prints it in one line, exit 2).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .figures import save as save_figure


def plot_runs(paths: list[Path], out: Path) -> None:
    """Every run folder checked (``_load``), then test accuracy (left) and loss (right) against the
    round, one line per run, written to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = [(path, *_load(path)) for path in paths]  # all checked before any drawing
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for path, rec, cfg in runs:
        label = f"{path.name} ({cfg.get('strategy', '?')}, {cfg.get('dataset', '?')})"
        rounds = [r["round"] for r in rec]
        axes[0].plot(rounds, [100 * _value(r, "test_acc") for r in rec], label=label)
        axes[1].plot(rounds, [_value(r, "test_loss") for r in rec], label=label)
    for ax, ylabel in zip(axes, ("test accuracy (%)", "test loss")):
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole
        ax.grid(alpha=0.3)
    fig.suptitle(f"test accuracy and loss per round: {len(runs)} run(s), one line each (no bands: single runs)",
                 fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(labels) - 1) // 3), 1, 1))
    try:
        save_figure(fig, out, dpi=110)
    finally:
        plt.close(fig)


def _value(rec: dict, key: str) -> float:
    v = rec.get(key)
    return float("nan") if v is None else float(v)


def _load(path: Path) -> tuple[list[dict], dict]:
    """(records, config.json) of a run folder; a ValueError naming the file if it is not a run's."""
    from .results import read_rounds

    if not path.is_dir():
        raise ValueError(f"{path} is not a folder (a run folder is <output-dir>/<run-name>)")
    from .packed import packed_records

    if not (path / "rounds.jsonl").is_file() and (os.path.lexists(path / "rounds.jsonl") or
                                                  packed_records(path) is None):
        raise ValueError(f"{path} holds no rounds.jsonl (not a run folder)")  # nor a packed study's cell
    try:
        rec = read_rounds(path)
    except UnicodeDecodeError:
        raise ValueError(f"{path / 'rounds.jsonl'}: not text (binary or corrupt)") from None
    except OSError as exc:
        raise ValueError(f"{path / 'rounds.jsonl'}: cannot be read ({exc.strerror or exc})") from None
    if not rec:
        raise ValueError(f"{path / 'rounds.jsonl'}: no round records (nothing to plot)")
    for i, r in enumerate(rec):
        bad = [k for k in ("test_acc", "test_loss") if r.get(k) is not None and not _number(r[k])]
        if not (isinstance(r.get("round"), int) and not isinstance(r["round"], bool)) or bad:
            raise ValueError(f"{path / 'rounds.jsonl'}, record {i + 1}: not a round record (needs an integer "
                             f"'round' and numbers or null as 'test_acc' and 'test_loss')")
    return rec, _config(path / "config.json")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (math.isnan(v) or abs(v) < 1e300)


def _config(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a run's config.json ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: not a run's config.json (not a JSON object)")
    return cfg


def check_out(out: Path) -> None:
    """``--out`` must be a file in an existing folder, of an image type matplotlib writes."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give a file name, e.g. {out / 'plot.png'}")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: no folder {out.parent}")
    if out.suffix and out.suffix[1:].lower() not in kinds:
        raise ValueError(f"--out {out}: unknown image type {out.suffix!r}; one of {', '.join(sorted(kinds))}")
