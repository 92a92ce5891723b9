"""The end-of-run summary: summary.json and the lines printed last."""
from __future__ import annotations

from typing import Any


def fmt(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.4f}"


def summarize(records: list[dict[str, Any]], **fields) -> dict[str, Any]:
    return {
        **fields,
        "final_test_acc": records[-1]["test_acc"], "final_test_loss": records[-1]["test_loss"],
        "initial_test_acc": records[0]["test_acc"], "best_test_acc": max(r["test_acc"] or 0 for r in records),
        "total_client_compute_s": sum(r["client_compute_s"] or 0 for r in records),
        "total_local_steps": sum(r["local_steps"] or 0 for r in records),
        "total_uplink_bytes": sum(r["uplink_bytes"] or 0 for r in records),
        "total_downlink_bytes": sum(r["downlink_bytes"] or 0 for r in records),
        "total_failures": sum(r.get("failures") or 0 for r in records),
    }


def summary_lines(title: str, s: dict[str, Any], setting: str) -> list[str]:
    return [f"{title} on {s['dataset']}: {setting}",
            f"  test accuracy {fmt(s['initial_test_acc'])} -> {fmt(s['final_test_acc'])} "
            f"(best {fmt(s['best_test_acc'])}), test loss {fmt(s['final_test_loss'])}",
            f"  {s['total_local_steps']} local steps, {s['total_client_compute_s']:.1f}s client "
            f"compute, {s['total_wall_s']:.1f}s wall",
            f"  results: {s['results_dir']}"]
