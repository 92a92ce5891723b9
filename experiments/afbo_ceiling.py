"""AFBO's ceiling against FedNest's (issue 50, item 1): FedNest run on past its verdict grid's budget.

    python experiments/afbo_ceiling.py RUNS/afbo_verdict/ceiling [--clean RUNS/afbo_verdict/clean] \
        --out docs/results/afbo_verdict/ceiling
    python experiments/afbo_ceiling.py --from docs/results/afbo_verdict/ceiling   # recompute from the committed files

At the verdict grids' budgets (experiments/afbo_verdict_*.toml) AFBO's curves are level while FedNest's still
rise in some settings, so a reading at T gives AFBO's ceiling but only a lower bound of FedNest's. The grid
experiments/afbo_verdict_ceiling.toml runs FedNest (outer-lr as picked; seeds 3-7) for twice its verdict grid's
budget. The first form packs its cells into OUT/rounds.parquet and OUT/runs.csv (as experiments/afbo_verdict.py
does), then writes OUT/ceiling.json, OUT/ceiling.md and OUT/fig_ceiling_<setting>.png; the second recomputes
those from the two files and the verdict folders (``--verdicts``, default docs/results/afbo_verdict). With
``--clean``, the clean-label control's cells (experiments/afbo_verdict_clean.toml: corruption = 0, outer-lr = 0)
are packed into OUT/clean/ the same way and read beside each setting of the same split.

Readings per setting (fixed in experiments/afbo_verdict_ceiling.toml before the grid's first reading):
- The long runs repeat their verdict-grid runs: every record of the verdict run (same setting, seed, picks) is
  in the long run with the same clock, test accuracy and test loss (``prefix_max_abs_diff``; refused above
  ``PREFIX_TOL``), so the long runs extend the verdict's curves rather than draw new ones.
- Stopped rising, the ceiling rule: per run, the least-squares slope of test accuracy against simulated time over
  its records with clock in [T/2, T] (T: its final clock), times T/4 (``quarter_gain``: the gain the slope gives
  over a quarter); over the seeds a 95% t interval: "stopped" when its upper end is below 0.1 points
  (afbo_verdict's ``RISE_TOL``), "rising" when its lower end is above 0, "undecided" otherwise (afbo_verdict's
  ``quarter_gain``, ``curve_of``: the verdicts read their runs by it too). Beside it the verdict grids'
  two-point rule, acc(T) - acc(3T/4) (``two_point_gain``). Applied to FedNest's long runs and, on their own
  records, to AFBO's and FedNest's verdict runs.
- Level of a run: the mean test accuracy (and weight AUC) of its records with clock in [3T/4, T]; a method's
  level is its ceiling only where its curve has stopped by the rule (``ceiling_stated``), else a lower bound.
- Paired by seed: FedNest's level (long runs) - AFBO's (its verdict runs), and FedNest's long level - its level
  at the verdict budget (what the doubled budget added).
- Time to the targets (89.5% test accuracy, weight AUC 0.9) within the long runs' budget.
- The clean-label control (OUT/clean, where present): the lower level alone on uncorrupted labels, the most
  hyper-cleaning can give this model; its level minus FedNest's long level and minus AFBO's, paired by seed:
  the room each upper level leaves. Read for every setting of its split (``CLEAN_OF``: the clean level is the
  data's and the model's, not the clock's); the figures draw it as a level (a band), not as a curve on the
  setting's clock.
Numbers are mean +- half-width of the 95% t interval (n - 1 degrees of freedom), n seeds.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
from afbo_plot import first_reach
from afbo_verdict import RISE_TOL, at, curve_of, level, load, pack, pm, quarter_gain, study_folder, study_parser
from report_common import band, iv  # modules beside this script

ROOT = Path(__file__).resolve().parent.parent
PREFIX_TOL = 1e-9  # a long run's records against its verdict run's: the same computation, so the same numbers
# each setting of the ceiling grid -> the verdict folder whose runs it extends (docs/results/afbo_verdict/<folder>)
BASES = {"iid_nostragglers_comm0.05": "comm", "iid_stragglers": "stragglers",
         "noniid-alpha0.5_nostragglers": "noniid", "iid_nostragglers": "iid_long"}
# each setting -> the clean-label control's setting of the same split
CLEAN_OF = {"iid_nostragglers_comm0.05": "iid_nostragglers", "iid_stragglers": "iid_nostragglers",
            "noniid-alpha0.5_nostragglers": "noniid-alpha0.5_nostragglers", "iid_nostragglers": "iid_nostragglers"}


# -- the long runs against their verdict runs ----------------------------------------------------------------
def prefix_gap(long: dict, base: dict) -> float:
    """The largest difference between ``base``'s records and the long run's records of the same rounds (clock,
    test accuracy, test loss); inf when the long run lacks one of them."""
    if len(long["clock"]) < len(base["clock"]):
        return float("inf")
    n = len(base["clock"])
    return float(max(np.max(np.abs(long[k][:n] - base[k][:n])) for k in ("clock", "acc", "loss")))


# -- readings ----------------------------------------------------------------------------------------------------
def method_reading(rs: list[dict], target: float, auc_target: float) -> dict:
    T = min(float(r["clock"][-1]) for r in rs)
    gain = iv([quarter_gain(r["clock"], r["acc"]) for r in rs])
    times = [first_reach(r, target, T, "acc") for r in rs]
    auc_times = [first_reach(r, auc_target, T, "auc") for r in rs]
    curve = curve_of(gain)
    return {"label": rs[0]["method"], "seeds": [r["seed"] for r in rs], "n": len(rs),
            "diverged": sum(r["diverged"] for r in rs), "final_clock_s": iv([float(r["clock"][-1]) for r in rs]),
            "quarter_gain": gain, "curve": curve, "ceiling_stated": curve == "stopped",
            "two_point_gain": iv([at(r, "acc", T) - at(r, "acc", 0.75 * T) for r in rs]),
            "level_acc": iv([level(r["clock"], r["acc"]) for r in rs]),
            "level_auc": iv([level(r["clock"], r["auc"]) for r in rs if np.all(np.isfinite(r["auc"]))]),
            "final_acc": iv([float(r["acc"][-1]) for r in rs]),
            "reached_target": sum(math.isfinite(t) for t in times),
            "time_to_target": iv([t for t in times if math.isfinite(t)]),
            "reached_auc_target": sum(math.isfinite(t) for t in auc_times),
            "time_to_auc_target": iv([t for t in auc_times if math.isfinite(t)])}


def setting_reading(long: list[dict], base: list[dict], base_name: str, target: float, auc_target: float,
                    clean: list[dict] | None = None) -> dict:
    """The long FedNest runs of one setting against the AFBO and FedNest runs of its verdict folder (and the
    clean-label control's runs of its split, when given)."""
    by = {key: {r["seed"]: r for r in base if r["key"] == key} for key in ("afbo", "fednest")}
    long_by = {r["seed"]: r for r in long}
    if len(long_by) != len(long):
        raise SystemExit(f"{long[0]['setting']}: two long runs with one seed; one run per seed is read")
    gaps = {}
    for seed, r in sorted(long_by.items()):
        if seed not in by["fednest"]:
            raise SystemExit(f"{r['setting']}: seed {seed} has no FedNest run in {base_name} to extend")
        gaps[seed] = prefix_gap(r, by["fednest"][seed])
        if not gaps[seed] <= PREFIX_TOL:
            raise SystemExit(f"{r['setting']}: the long run of seed {seed} ({r['cell']}) does not repeat its verdict "
                             f"run in {base_name} ({by['fednest'][seed]['cell']}; largest difference "
                             f"{gaps[seed]:.3g}): not the same run extended, so no reading")
    seeds = sorted(set(long_by) & set(by["afbo"]))
    methods = {"fednest_long": method_reading([long_by[s] for s in sorted(long_by)], target, auc_target),
               "fednest": method_reading([by["fednest"][s] for s in sorted(long_by)], target, auc_target),
               "afbo": method_reading([by["afbo"][s] for s in seeds], target, auc_target)}
    for m in methods.values():
        m["label"] = m["label"].split(" (")[0]
    paired = {
        "fednest_long_minus_afbo": {
            "level_acc": iv([level(long_by[s]["clock"], long_by[s]["acc"])
                               - level(by["afbo"][s]["clock"], by["afbo"][s]["acc"]) for s in seeds]),
            "level_auc": iv([level(long_by[s]["clock"], long_by[s]["auc"])
                               - level(by["afbo"][s]["clock"], by["afbo"][s]["auc"]) for s in seeds])},
        "fednest_long_minus_fednest": {
            "level_acc": iv([level(long_by[s]["clock"], long_by[s]["acc"])
                               - level(by["fednest"][s]["clock"], by["fednest"][s]["acc"]) for s in sorted(long_by)])}}
    if clean:
        clean_by = {r["seed"]: r for r in clean}
        methods["clean"] = method_reading([clean_by[s] for s in sorted(clean_by)], target, auc_target)
        methods["clean"]["label"] = "clean labels, x fixed"

        def room(runs: dict[int, dict]) -> list:
            common = sorted(set(clean_by) & set(runs))
            return iv([level(clean_by[s]["clock"], clean_by[s]["acc"]) - level(runs[s]["clock"], runs[s]["acc"])
                       for s in common])

        paired["clean_minus_fednest_long"] = {"level_acc": room(long_by)}
        paired["clean_minus_afbo"] = {"level_acc": room(by["afbo"])}
    return {"verdict_folder": base_name, "T_long_s": methods["fednest_long"]["final_clock_s"][0],
            "T_verdict_s": min(float(r["clock"][-1]) for r in base if r["status"] == "ok"),
            "prefix_max_abs_diff": max(gaps.values()), "target_acc": target, "target_auc": auc_target,
            "stop_tol": RISE_TOL, "methods": methods, "paired": paired}


# -- writing -----------------------------------------------------------------------------------------------------
def table_md(setting: str, S: dict) -> list[str]:
    tgt = f"{100 * S['target_acc']:g}%"
    lines = [f"### {setting}", "",
             f"FedNest run to {S['T_long_s']:.1f} simulated s (its verdict runs, {S['verdict_folder']}: "
             f"T = {S['T_verdict_s']:.1f} s; the long runs repeat them record for record, largest difference "
             f"{S['prefix_max_abs_diff']:.3g}). Mean +- 95% t interval over seeds; every run counted.", "",
             "| runs | seeds | diverged | own end (s) | gain per quarter, last-half slope (points) | curve | two-point "
             f"gain [3T/4, T] (points) | level: acc. over [3T/4, T] (%) | level: weight AUC | final acc. (%) | "
             f"reached {tgt} | time to {tgt} (s) | reached AUC {S['target_auc']:g} | time to AUC (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    names = {"fednest_long": "FedNest, long", "fednest": "FedNest, verdict budget", "afbo": "AFBO, verdict budget",
             "clean": "clean labels, x fixed (FedNest's engine, 4x)"}
    for key, m in S["methods"].items():
        lines.append(
            f"| {names[key]} | {','.join(map(str, m['seeds']))} | {m['diverged']}/{m['n']} | "
            f"{pm(m['final_clock_s'], 1, 1)} | {pm(m['quarter_gain'], 100, 2, True)} | {m['curve']} | "
            f"{pm(m['two_point_gain'], 100, 2, True)} | {pm(m['level_acc'])} | {pm(m['level_auc'], 1, 3)} | "
            f"{pm(m['final_acc'])} | {m['reached_target']}/{m['n']} | {pm(m['time_to_target'], 1, 2)} | "
            f"{m['reached_auc_target']}/{m['n']} | {pm(m['time_to_auc_target'], 1, 2)} |")
    p, q = S["paired"]["fednest_long_minus_afbo"], S["paired"]["fednest_long_minus_fednest"]
    lines += ["", "Paired by seed (a level is a ceiling where its curve has stopped, else a lower bound):", "",
              f"- FedNest's level (long) - AFBO's: accuracy {pm(p['level_acc'], 100, 2, True)} points, weight AUC "
              f"{pm(p['level_auc'], 1, 3, True)}",
              f"- FedNest's level (long) - its level at the verdict budget: {pm(q['level_acc'], 100, 2, True)} "
              "points"]
    if "clean_minus_afbo" in S["paired"]:
        lines += [f"- the clean-label level - FedNest's level (long): "
                  f"{pm(S['paired']['clean_minus_fednest_long']['level_acc'], 100, 2, True)} points; - AFBO's: "
                  f"{pm(S['paired']['clean_minus_afbo']['level_acc'], 100, 2, True)} points"]
    lines += [""]
    return lines


def figure(setting: str, long: list[dict], base: list[dict], S: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zofl.figures import save

    fig, ax = plt.subplots(figsize=(7, 4))
    for rs, color, name, T in ((long, "C1", "FedNest, long", S["T_long_s"]),
                               ([r for r in base if r["key"] == "afbo"], "C0", "AFBO, verdict budget",
                                S["T_verdict_s"])):
        grid = np.linspace(0, T, 300)
        mean, half = band(np.array([[at(r, "acc", t) for t in grid] for r in rs]) * 100)
        ax.plot(grid, mean, color=color, label=f"{name} (n={len(rs)})")
        ax.fill_between(grid, mean - half, mean + half, color=color, alpha=0.15)
    if "clean" in S["methods"]:  # a level, not a curve: its runs are on the free clock whatever the setting's
        mean, half, n = S["methods"]["clean"]["level_acc"]
        ax.axhspan(100 * (mean - half), 100 * (mean + half), color="C2", alpha=0.2)
        ax.axhline(100 * mean, color="C2", lw=1.0, label=f"clean-label control's level (x fixed, n={n})")
    ax.axvline(S["T_verdict_s"], color="grey", lw=0.8, ls="--")
    ax.axhline(100 * S["target_acc"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(85, 92)
    ax.set_title(f"{setting} (dashed: the verdict grid's T)", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, path, dpi=90)
    plt.close(fig)


def report(out: Path, verdicts: Path, target: float, auc_target: float, below: float, figures: bool = True) -> dict:
    runs, _ = load(out, below)
    clean = load(out / "clean", below)[0] if (out / "clean" / "rounds.parquet").exists() else []
    if any(r["key"] != "fednest:control" for r in clean):
        raise SystemExit(f"{out / 'clean'}: the clean-label control runs FedNest with outer-lr = 0 only")
    summary, lines = {}, ["Generated by `python experiments/afbo_ceiling.py --from " + str(out) + "` from runs.csv, "
                          "rounds.parquet and the verdict folders (experiments/afbo_ceiling.py's docstring defines "
                          "every column).", ""]
    for setting in sorted({r["setting"] for r in runs}):
        if setting not in BASES:
            raise SystemExit(f"{setting}: no verdict folder to extend (known: {', '.join(BASES)})")
        long = [r for r in runs if r["setting"] == setting]
        if any(r["key"] != "fednest" for r in long):
            raise SystemExit(f"{setting}: the ceiling grid runs FedNest with its upper level only")
        base = [r for r in load(verdicts / BASES[setting], below)[0] if r["setting"] == setting]
        summary[setting] = setting_reading(long, base, BASES[setting], target, auc_target,
                                           [r for r in clean if r["setting"] == CLEAN_OF[setting]])
        lines += table_md(setting, summary[setting])
        if figures:
            figure(setting, long, base, summary[setting], out / f"fig_ceiling_{setting}.png")
    (out / "ceiling.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    (out / "ceiling.md").write_text("\n".join(lines))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = study_parser(__doc__.split("\n")[0])
    ap.add_argument("--clean", nargs="+", type=Path, default=[],
                    help="the clean-label control's compare folders (experiments/afbo_verdict_clean.toml), with RUNS")
    ap.add_argument("--verdicts", type=Path, default=ROOT / "docs" / "results" / "afbo_verdict",
                    help="the folder of the verdict studies the long runs extend")
    a = ap.parse_args(argv)
    out = study_folder(ap, a)
    if a.src is None:
        pack(a.runs, out, a.diverged_below)
        if a.clean:
            pack(a.clean, out / "clean", a.diverged_below)
    report(out, a.verdicts, a.target, a.auc_target, a.diverged_below, figures=not a.no_figures)
    print((out / "ceiling.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
