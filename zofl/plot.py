"""``zofl plot``: test accuracy and loss per round of run folders, one PNG (matplotlib, Agg).

The PNG's path and every folder are checked before anything is drawn: a folder that is no run, or
whose rounds.jsonl or config.json is not a run's (binary, torn, empty, wrong types, not a regular file,
too large or nested too deep: zofl.safeio), is refused with a ValueError naming the file (the CLI
prints it in one line, exit 2). The image is written to exactly the path given (``write_image``).
"""
from __future__ import annotations

import math
import os
import secrets
import stat
from pathlib import Path

from .core.record import evaluated
from .figures import save as save_figure
from .packed import packed_records
from .results import read_rounds, read_run_json
from .safeio import kind


def plot_runs(paths: list[Path], out: Path) -> None:
    """Every run folder checked (``_load``), then test accuracy (left) and loss (right) against the
    round, one line per run on the server's test set (the rounds it evaluated: eval-every), and a dashed one on
    the clients' held-out data where the run had a federated evaluation (its rounds), written to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = [(path, *_load(path)) for path in paths]  # all checked before any drawing
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for path, rec, cfg in runs:
        label = f"{path.name} ({cfg.get('strategy', '?')}, {cfg.get('dataset', '?')})"
        server = [r for r in rec if evaluated(r)]  # the records the server evaluated (eval-every)
        rounds = [r["round"] for r in server]
        line, = axes[0].plot(rounds, [100 * _value(r, "test_acc") for r in server],
                             label=f"{label}: server's test set")
        axes[1].plot(rounds, [_value(r, "test_loss") for r in server], color=line.get_color())
        fed = [r for r in rec if "fed_examples" in r]  # the rounds the clients evaluated (federated evaluation)
        if fed:
            axes[0].plot([r["round"] for r in fed], [100 * _value(r, "fed_acc") for r in fed], "--o", markersize=3,
                         color=line.get_color(), label=f"{label}: clients' held-out data (federated)")
            axes[1].plot([r["round"] for r in fed], [_value(r, "fed_loss") for r in fed], "--o", markersize=3,
                         color=line.get_color())
    for ax, ylabel in zip(axes, ("test accuracy (%)", "test loss")):
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole
        ax.grid(alpha=0.3)
    fig.suptitle(f"test accuracy and loss per round: {len(runs)} run(s), one line each (no bands: single runs; "
                 f"dashed: federated evaluation)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(labels) - 1) // 3), 1, 1))
    try:
        write_image(fig, out, dpi=110)
    finally:
        plt.close(fig)


class WriteError(OSError):
    """The image could not be written (disk full, no permission, file too large); the message names --out."""


def write_image(fig, out: Path, dpi: int) -> None:
    """``fig`` written to exactly ``out`` (``check_out`` has checked it): drawn into a new file beside it
    (created here, O_EXCL: never an existing file or a link's target), then renamed over ``out``, so ``out``
    ends as a regular file of that name and a failed write leaves whatever was there as it was; a failure is
    a WriteError naming ``out`` and the cause, in one line."""
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp{out.suffix}")  # the suffix names the type
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        save_figure(fig, tmp, dpi=dpi)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteError(f"--out {out}: cannot be written ({exc.strerror or exc}); nothing was written") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _value(rec: dict, key: str) -> float:
    v = rec.get(key)
    return float("nan") if v is None else float(v)


def _load(path: Path) -> tuple[list[dict], dict]:
    """(records, config.json) of a run folder; a ValueError naming the file if it is not a run's."""
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder (a run folder is <output-dir>/<run-name>)")

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
        bad = [k for k in ("test_acc", "test_loss", "fed_acc", "fed_loss")
               if r.get(k) is not None and not _number(r[k])]
        if not (isinstance(r.get("round"), int) and not isinstance(r["round"], bool)) or bad:
            raise ValueError(f"{path / 'rounds.jsonl'}, record {i + 1}: not a round record (needs an integer "
                             f"'round' and numbers or null as 'test_acc', 'test_loss', 'fed_acc' and 'fed_loss')")
    return rec, _config(path / "config.json")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (math.isnan(v) or abs(v) < 1e300)


def _config(path: Path) -> dict:
    """A run's config.json (``results.read_run_json``), {} where there is none."""
    return read_run_json(path) if path.exists() else {}


def check_out(out: Path) -> None:
    """``--out`` must be a file in an existing folder, named with the suffix of an image type matplotlib
    writes (without one, matplotlib would write OUT.png, not the OUT the command names), and either new or a
    regular file (a FIFO or a device such as /dev/full is no image file)."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    known = ", ".join(f".{k}" for k in sorted(kinds))
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give a file name, e.g. {out / 'plot.png'}")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: no folder {out.parent}")
    if not out.suffix:
        raise ValueError(f"--out {out}: no image type suffix (the file is written as named); end it in one of "
                         f"{known}, e.g. {out}.png")
    if out.suffix[1:].lower() not in kinds:
        raise ValueError(f"--out {out}: unknown image type {out.suffix!r}; one of {known}")
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot be used ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"--out {out}: is a {kind(mode)}, not a regular file; give the path of an image file")
