"""How much each method loses to the stragglers, at each communication latency (issue 31, item 11:
"synchronous methods are significantly affected by stragglers while AFBO suffers slightly").

From two studies' per-round records (rounds.parquet of afbo_plot.py --records) at the same comm-s, one
with the stragglers (clients 0-4, straggler-factor 5) and one without, per split:
  T*       = the smaller of the two studies' budgets (each the smallest final clock of its setting)
  penalty  = test loss at T* with stragglers - without (zero-order hold), per method and seed (same
             seed = same split and draws of everything but the stragglers), mean +- 95% t interval
  claim    = FedNest's penalty - AFBO's (> 0: FedNest suffers more), paired by seed
  controls = the same for the outer-lr = 0 controls (asynchrony alone, x frozen)

    python experiments/afbo_comm_straggler_penalty.py

It also prints the same table for the anarchic clients (anarchic/ against latency1c/, IID).

    python experiments/afbo_comm_straggler_penalty.py --task verdict --json docs/results/afbo_verdict/penalty.json

does it at n = 5 from the AFBO verdict grids (docs/results/afbo_verdict): the straggler grid against the grids
without stragglers at twice and four times E7's budget (the same settings, picks and seeds), in test accuracy.

    python experiments/afbo_comm_straggler_penalty.py --task cleaning

does the same for the hyper-cleaning latency sweep (docs/results/afbo_cleaning; IID, seeds 3-5) in test
accuracy, points (< 0: the stragglers cost accuracy; FedNest's - AFBO's < 0: FedNest suffers more).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from report_common import AFBO, CONTROL, FEDNEST, curves, hold, json_interval, split_of  # a module beside this script

from zofl.stats import fmt_interval, interval

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
HERE = RESULTS / "afbo" / "comm"  # the study folder
LATENCIES = [("latency0", "0"), ("latency1c", "c = 0.05 s"), ("latency10c", "10c = 0.5 s")]
CLEANING = RESULTS / "afbo_cleaning"
CLEANING_PAIRS = [("stragglers_comm0", "study", "0"), ("stragglers", "nostragglers_comm1c", "c = 0.05 s"),
                  ("stragglers_comm10c", "nostragglers_comm10c", "10c = 0.5 s"),
                  ("stragglers_noniid_comm0", "study", "0")]  # (with, without, comm-s); non-IID: at 0 only
VERDICT = RESULTS / "afbo_verdict"  # the n = 5 verdict grids: the straggler one against the two without
VERDICT_PAIRS = [("stragglers", "iid", "2x E7's"), ("stragglers", "iid_long", "4x E7's")]
REG_MNIST = RESULTS / "afbo_reg_mnist"
REG_MNIST_PAIRS = [("stragglers_comm0", "study", "0"), ("stragglers", "nostragglers_comm1c", "c = 0.05 s"),
                   ("stragglers_comm10c", "nostragglers_comm10c", "10c = 0.5 s")]


def penalties(s_path: Path, n_path: Path, metric: str = "test_loss", scale: float = 1.0) -> list[dict]:
    """Per split of the two studies: T* and the intervals (mean, half-width, n; times ``scale``) of AFBO's and
    FedNest's penalties, FedNest's - AFBO's ("claim"), the same for the controls, and the claim less the controls'
    ("beyond": the 2 x 2 interaction, stragglers x upper level)."""
    S, N = (curves(p, metric, scale, split_of) for p in (s_path, n_path))
    out = []
    for split in sorted(set(S) & set(N)):
        T = min(min(r[-1][0] for ms in D[split].values() for r in ms.values()) for D in (S, N))

        def pen(m: str) -> dict[int, float]:
            seeds = sorted(set(S[split][m]) & set(N[split][m]))
            return {sd: hold(S[split][m][sd], T) - hold(N[split][m][sd], T) for sd in seeds}

        a, f, ac, fc = pen(AFBO), pen(FEDNEST), pen(AFBO + CONTROL), pen(FEDNEST + CONTROL)
        seeds = sorted(set(a) & set(f) & set(ac) & set(fc))
        claim = [f[s] - a[s] for s in seeds]
        ctrl = [fc[s] - ac[s] for s in seeds]
        out.append({"split": split, "T_s": T, "afbo": interval(a.values()), "fednest": interval(f.values()),
                    "claim": interval(claim), "controls": interval(ctrl),
                    "beyond": interval(x - y for x, y in zip(claim, ctrl))})
    return out


def rows(s_path: Path, n_path: Path, label: str, metric: str = "test_loss", scale: float = 1.0,
         digits: int = 3) -> list[str]:
    return [f"| {label} | {p['split']} | {p['T_s']:.1f} | "
            + " | ".join(fmt_interval(p[k], digits=digits) for k in ("afbo", "fednest", "claim", "controls", "beyond"))
            + " |" for p in penalties(s_path, n_path, metric, scale)]


def verdict(json_out: Path | None) -> None:
    """The straggler penalty at n = 5 from the verdict grids (docs/results/afbo_verdict): the straggler grid
    (T about 250 s) read at the budget of each grid without stragglers (same settings, picks and seeds 3-7)."""
    print("Stragglers' penalty on MNIST hyper-cleaning, IID, communication free (test accuracy at T* with the "
          "stragglers - without, points), mean +- 95% t interval over seeds, paired by seed:\n")
    print(HEAD.format(what="budget").replace("> 0: FedNest suffers more", "< 0: FedNest suffers more")
          .replace("bilevel part of it", "beyond the controls' (the 2 x 2 interaction)"))
    found = {}
    for with_, without, label in VERDICT_PAIRS:
        for p in penalties(VERDICT / with_ / "rounds.parquet", VERDICT / without / "rounds.parquet", "test_acc"):
            found[f"{without}/{p['split']}"] = p
            print(f"| {label} | {p['split']} | {p['T_s']:.1f} | " + " | ".join(
                fmt_interval(p[k], 100.0, 2) for k in ("afbo", "fednest", "claim", "controls", "beyond")) + " |")
    if json_out is not None:
        json_out.write_text(json.dumps({k: {f: json_interval(v) if isinstance(v, tuple) else v for f, v in p.items()}
                                        for k, p in found.items()}, indent=1, sort_keys=True) + "\n")


HEAD = ("| {what} | split | T* (s) | AFBO's penalty | FedNest's penalty | FedNest's - AFBO's (> 0: FedNest "
        "suffers more) | the same for the outer-lr = 0 controls (asynchrony alone) | bilevel part of it |\n"
        "|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=("regularization", "cleaning", "reg-mnist", "verdict"), default="regularization")
    ap.add_argument("--json", type=Path, help="(--task verdict) also write the intervals here, as fractions")
    a = ap.parse_args(argv)
    task = a.task
    if task == "verdict":
        verdict(a.json)
        return
    if task == "reg-mnist":
        print("Stragglers' penalty on MNIST regularization (test loss at T* with the stragglers - without), mean +- "
              "95% t interval over seeds, paired by seed:\n")
        print(HEAD.format(what="comm-s"))
        for with_, without, label in REG_MNIST_PAIRS:
            s_path, n_path = REG_MNIST / with_ / "rounds.parquet", REG_MNIST / without / "rounds.parquet"
            if s_path.exists() and n_path.exists():
                print("\n".join(rows(s_path, n_path, label, digits=4)))
        return
    if task == "cleaning":
        print("Stragglers' penalty (test accuracy at T* with the stragglers - without, points), mean +- 95% t "
              "interval over seeds, paired by seed:\n")
        print(HEAD.format(what="comm-s").replace("> 0: FedNest suffers more", "< 0: FedNest suffers more"))
        for with_, without, label in CLEANING_PAIRS:
            s_path, n_path = CLEANING / with_ / "rounds.parquet", CLEANING / without / "rounds.parquet"
            if s_path.exists() and n_path.exists():
                print("\n".join(rows(s_path, n_path, label, "test_acc", 100.0, 2)))
        return
    print("Stragglers' penalty (test loss at T* with the stragglers - without), mean +- 95% t interval over "
          "seeds, paired by seed:\n")
    print(HEAD.format(what="comm-s"))
    for folder, label in LATENCIES:
        s_path, n_path = HERE / folder / "rounds.parquet", HERE / f"nostragglers_{folder}" / "rounds.parquet"
        if s_path.exists() and n_path.exists():
            print("\n".join(rows(s_path, n_path, label)))
    a_path, b_path = HERE / "anarchic" / "rounds.parquet", HERE / "latency1c" / "rounds.parquet"
    if a_path.exists() and b_path.exists():
        print("\nAnarchic clients' penalty (test loss at T* in anarchic/ - in latency1c/: the same comm-s = c and "
              "stragglers, plus availability, leave and, for AFBO only, heterogeneous E_i and N_i):\n")
        print(HEAD.format(what="comm-s"))
        print("\n".join(rows(a_path, b_path, "c = 0.05 s")))

if __name__ == "__main__":
    main()
