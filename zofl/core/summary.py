"""The end-of-run summary: summary.json and the lines printed last."""
from __future__ import annotations

from typing import Any

from .policy import kind_counts
from .protocol import NO_DATA, NO_PARTITION
from .record import RoundRecord, last_evaluated
from .startup import startup_line


def fmt(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.4f}"


def summarize(records: list[RoundRecord], **fields) -> dict[str, Any]:
    """summary.json's figures of ``records``: the final test accuracy and loss are the last evaluated record's (the
    last round's, always evaluated; of a run the failure policy stopped, the last before it: eval-every), the best
    counts a null (a record without the server's evaluation) as 0, the totals count every record."""
    final = last_evaluated(records)
    return {
        **fields,
        "final_test_acc": final["test_acc"], "final_test_loss": final["test_loss"],
        "initial_test_acc": records[0]["test_acc"], "best_test_acc": max(r["test_acc"] or 0 for r in records),
        "total_client_compute_s": sum(r["client_compute_s"] or 0 for r in records),
        "total_local_steps": sum(r["local_steps"] or 0 for r in records),
        "total_uplink_bytes": sum(r["uplink_bytes"] or 0 for r in records),
        "total_downlink_bytes": sum(r["downlink_bytes"] or 0 for r in records),
        "total_failures": sum(r.get("failures") or 0 for r in records),
        "total_sampled": sum(len(r.get("sampled") or []) for r in records),
        "total_participants": sum(r.get("participants") or 0 for r in records),
        "total_dropped": sum(r.get("dropped") or 0 for r in records),
        "total_rejected": sum(r.get("rejected") or 0 for r in records),
        **{f"total_{k}": sum(r.get(k) or 0 for r in records)
           for k in ("late", "errors", "lost", "late_queued", "late_slow", "late_failed")},
        "rounds_model_rejected": sum(bool(r.get("model_rejected")) for r in records),
        "failures_by_client": _by_client(records),
        "total_outlier_replies": sum(len(r.get("outliers") or []) for r in records),
        "outliers_by_client": _by_client(records, "outliers"),
        **fed_summary(records),
    }


def fed_summary(records: list[RoundRecord]) -> dict[str, Any]:
    """The federated evaluation's figures (``zofl.core.evaluation``; none when the run had none): how many rounds
    were evaluated by the clients, and the last one's round, accuracy, loss, examples and answering clients."""
    evaluated = [r for r in records if "fed_examples" in r]
    if not evaluated:
        return {}
    last = evaluated[-1]
    return {"fed_evaluations": len(evaluated), "final_fed_round": last["round"], "final_fed_acc": last.get("fed_acc"),
            "final_fed_loss": last.get("fed_loss"), "final_fed_examples": last["fed_examples"],
            "final_fed_clients": last.get("fed_clients", 0), "total_fed_refused": sum(r.get("fed_refused") or 0
                                                                                     for r in evaluated)}


def add_pending(summary: dict[str, Any], failures: list) -> None:
    """Add failures not yet in any record (``protocol.Failure``s of an update that never came) to the
    summary's totals, so a run that ends before its next record still counts them."""
    if not failures:
        return

    summary["total_failures"] += len(failures)
    for kind, n in kind_counts(failures).items():
        summary[f"total_{kind}"] += n
    counts = {int(p): n for p, n in summary["failures_by_client"].items()}
    for pid in {f.pid for f in failures if f.pid is not None}:
        counts[pid] = counts.get(pid, 0) + 1
    summary["failures_by_client"] = {str(p): n for p, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def _by_client(records: list[RoundRecord], key: str = "failed_clients") -> dict[str, int]:
    """{client id: rounds in which it failed, was late or was rejected}, most first (lost SuperNodes show
    here); with key = "outliers": rounds in which its reply lay far outside the round's spread."""
    counts: dict[int, int] = {}
    for r in records:
        for pid in r.get(key) or []:
            counts[pid] = counts.get(pid, 0) + 1
    return {str(p): n for p, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


#: the summary warns of a client whose reply was far outside its round's spread (``zofl.algorithms.outliers``)
#: in at least OUTLIER_ROUNDS rounds and in at least OUTLIER_SHARE of the rounds its reply was used: a
#: hostile client is flagged round after round (the poisoning study's ``large`` one: every round), an
#: honest reply once in a while at most (none of 8 670 honest non-IID replies measured); the share makes a
#: client sampled in few rounds count as much as one sampled in all
OUTLIER_ROUNDS = 3
OUTLIER_SHARE = 0.2


def defence(cfg, clips: bool) -> str | None:
    """The run-config's rule that limits one hostile client's reply (a robust ``aggregation``, or ``coef-clip`` in a
    run whose method clips its coefficients with it: ``clips``, ``Method.clips_coefficients``), or None under the
    papers' plain mean."""
    if cfg.aggregation != "mean":
        return f'aggregation = "{cfg.aggregation}"'
    if cfg.coef_clip > 0 and clips:
        return f"coef-clip = {cfg.coef_clip:g}"
    return None


def used_rounds(records: list[RoundRecord]) -> dict[int, int]:
    """{client id: records (rounds, or asynchronous updates) that used its reply}: an update's ``used``
    list where it has one (AFBO's ``clients`` also lists replies held for a later step), else its
    ``clients``, else a round's sampled clients without a failure."""
    counts: dict[int, int] = {}
    for r in records:
        failed = set(r.get("failed_clients") or [])
        if r.get("used") is not None:
            used = [u["client"] for u in r["used"]]
        elif "clients" in r:
            used = r["clients"]
        else:
            used = [p for p in r.get("sampled") or [] if p not in failed]
        for pid in set(used):
            counts[pid] = counts.get(pid, 0) + 1
    return counts


def outlier_warning(records: list[RoundRecord], rule: str | None, clip: bool = False,
                    unit: str = "rounds") -> str | None:
    """The one warning line of a run under the papers' mean (``rule`` None) in which some client's replies were
    flagged as far outside their round's spread in at least OUTLIER_ROUNDS rounds and OUTLIER_SHARE of the
    rounds that used its reply; None otherwise (under a robust rule the summary reports the count only).
    It points to the median, and to coef-clip where it acts (``clip``), else to the trimmed mean."""
    flagged = {int(p): n for p, n in _by_client(records, "outliers").items()}
    used = used_rounds(records)
    persistent = sorted(p for p, n in flagged.items() if n >= OUTLIER_ROUNDS and n >= OUTLIER_SHARE * used.get(p, 0))
    if rule is not None or not persistent:
        return None
    who = ", ".join(f"{p} ({flagged[p]} of {max(flagged[p], used.get(p, 0))} {unit})" for p in persistent)
    rules = 'aggregation = "median" or coef-clip' if clip else 'aggregation = "median" or "trimmed-mean"'
    return (f"warning: replies of client(s) {who} lay far outside their {unit}' spread; under aggregation = "
            f'"mean" one hostile client can move the model: try {rules} (docs/robustness.md)')


def outlier_fields(records: list[RoundRecord], cfg, clips: bool) -> dict[str, Any]:
    """summary.json's ``robust_rule`` (``defence``) and ``outlier_warning`` (``outlier_warning``, or None);
    ``clips``: whether the run's method clips coefficients with coef-clip (``Method.clips_coefficients``)."""
    rule = defence(cfg, clips)
    unit = "updates" if cfg.engine == "async" else "rounds"
    return {"robust_rule": rule, "outlier_warning": outlier_warning(records, rule, clips, unit)}


def _outliers(s: dict[str, Any]) -> list[str]:
    """The count of replies far outside their round's spread (and the rule in force), then the warning."""
    n = s.get("total_outlier_replies") or 0
    if not n:
        return []
    by = s["outliers_by_client"]
    unit = "updates" if s.get("engine") == "async" else "rounds"
    rule = f"; limited by {s['robust_rule']}" if s.get("robust_rule") else ""
    return [f"  replies far outside their {unit}' spread: {n}, by client ({unit}): "
            + ", ".join(f"{p} ({k})" for p, k in list(by.items())[:8]) + (", ..." if len(by) > 8 else "") + rule,
            *([f"  {s['outlier_warning']}"] if s.get("outlier_warning") else [])]


def _kinds(s: dict[str, Any]) -> str:
    late = s.get("total_late", 0)
    told = [(s.get(f"total_late_{k}", 0), what) for k, what in
            (("queued", "queued behind other clients' work"), ("slow", "slow at the client"),
             ("failed", "then failed"))]
    unknown = late - sum(n for n, _ in told)
    parts = [f"{n} {what}" for n, what in told if n] + ([f"{unknown} with no reply seen"] if unknown > 0 else [])
    return (f"{late} late" + (f" ({', '.join(parts)})" if late and parts else "")
            + f", {s.get('total_errors', 0)} errors, {s.get('total_rejected', 0)} rejected, "
            f"{s.get('total_lost', 0)} lost (SuperNode gone)")


def summary_lines(title: str, s: dict[str, Any], setting: str) -> list[str]:
    return [f"{title} on {s['dataset']}: {setting}",
            f"  test accuracy {fmt(s['initial_test_acc'])} -> {fmt(s['final_test_acc'])} "
            f"(best {fmt(s['best_test_acc'])}), test loss {fmt(s['final_test_loss'])}" if s.get("server_test", True)
            else "  no test set on the server (server-data = none): see the federated evaluation",
            *([f"  federated evaluation (the clients' held-out data, round {s['final_fed_round']}: "
               f"{s['final_fed_clients']} clients, {s['final_fed_examples']} examples): accuracy "
               f"{fmt(s['final_fed_acc'])}, loss {fmt(s['final_fed_loss'])}"
               + (f"; {s['total_fed_refused']} answer(s) refused or missing" if s.get("total_fed_refused") else "")]
              if s.get("fed_evaluations") else []),
            f"  {s['total_local_steps']} local steps, {s['total_client_compute_s']:.1f}s client "
            f"compute, {s['total_wall_s']:.1f}s wall",
            *startup_line(s.get("startup")),
            f"  clients: {s.get('total_sampled', 0)} sampled, {s.get('total_participants', 0)} replies used, "
            f"{s.get('total_dropped', 0)} dropped; {s.get('total_failures', 0)} failures: {_kinds(s)}"
            + (f"; the aggregate was refused in {s['rounds_model_rejected']} round(s)"
               if s.get("rounds_model_rejected") else ""),
            *(["  clients with failures (rounds): "
               + ", ".join(f"{p} ({n})" for p, n in list(s["failures_by_client"].items())[:8])
               + (", ..." if len(s["failures_by_client"]) > 8 else "")] if s.get("failures_by_client") else []),
            *([f"  federation: no SuperNode holds partition(s) {s['unheld_partitions']}"]
              if s.get("unheld_partitions") else []),
            *(["  federation: refused SuperNode(s): "
               + ", ".join(f"{r['node']} (partition {r['claims']}, "
                           + ("not a partition of this run)" if r["held_by"] == NO_PARTITION else
                              f"its data cannot be used: {r.get('reason', '')})" if r["held_by"] == NO_DATA else
                              f"held by {r['held_by']})")
                           for r in s["refused_nodes"])] if s.get("refused_nodes") else []),
            *(["  federation: SuperNode(s) that took a partition over: "
               + ", ".join(f"{r['node']} (partition {r['partition']})" for r in s["rejoined_nodes"])]
              if s.get("rejoined_nodes") else []),
            *_outliers(s),
            *([f"  FAILED: {s['failure']}"] if s.get("status") == "failed" else []),
            f"  results: {s['results_dir'] or 'in memory only (a strategy given no results_dir)'}"]
