"""The failure policy: when a run has failed, in the spirit of Flower's ``min_fit_clients`` and
``accept_failures`` (our choice; the papers assume every sampled client answers).

A round is *failed* when fewer than ``min-replies`` usable replies reach the server (the
asynchronous engine has no rounds: there a *window* is every ``num-clients`` finished tasks,
replies and failures together, i.e. one round's worth of client work). A run stops, as failed,
as soon as it can no longer meet the policy: once more than ``max-failed-rounds`` x R of its
rounds have failed, R being its number of rounds (async: the least number of windows its updates
need, ceil(updates x buffer-size / num-clients)). Stopping then, not at the end, is exact: the
fraction at the end would be above the bound whatever the remaining rounds do.

What happened to each sampled client is counted by kind (``protocol.FAILURE_KINDS``), and a reply
that came after its deadline is told apart by ``late_kind``: a healthy client whose reply waited
behind other work (a Ray worker or a process pool busy with a hung client) is not a client fault.
"""
from __future__ import annotations

import math

from .protocol import Failure, Reply

#: why a reply came after its deadline (``late_kind``)
LATE_KINDS = ("queued", "slow", "failed")


class RunFailed(RuntimeError):
    """The failure policy stopped the run; the message says why (summary.json: status "failed")."""


def round_failed(usable: int, min_replies: int) -> bool:
    """Whether a round (or window) with ``usable`` usable replies is failed."""
    return usable < min_replies


def allowed_failures(rounds: int, max_failed_fraction: float) -> int:
    """How many failed rounds (or windows) a run of ``rounds`` rounds may have."""
    return math.floor(max_failed_fraction * rounds + 1e-9)


def async_windows(updates: int, buffer_size: int, num_clients: int) -> int:
    """The least number of windows of ``num_clients`` task results that ``updates`` updates need."""
    return max(1, math.ceil(updates * buffer_size / num_clients))


def failure_message(failed: int, rounds: int, min_replies: int, max_failed_fraction: float,
                    unit: str = "rounds") -> str:
    return (f"the failure policy stopped the run: {failed} {unit} had fewer than min-replies = {min_replies} usable "
            f"client replies, more than the {allowed_failures(rounds, max_failed_fraction)} that "
            f"max-failed-rounds = {max_failed_fraction:g} x {rounds} {unit} allows")


def late_kind(result: Reply | Failure, deadline_s: float, simulated: bool = False) -> str:
    """Why a reply arrived after its round's deadline, from the client's own measure ``handle_s``
    (seconds from the ClientApp receiving the message to its reply; no clock is compared across
    machines):

    * "queued": the client's work took at most ``deadline_s``, so the reply was late because the
      message waited before the client got it (behind other clients' work on a shared worker, or in
      transport): not the client's fault;
    * "slow": the client itself took longer than the deadline (a straggler or a hang; also any
      reply without ``handle_s``, and every late reply on the asynchronous engine's simulated clock,
      where durations are the device model's);
    * "failed": an error reply came after the deadline.
    """
    if isinstance(result, Failure):
        return "failed"
    handled = result.metrics.get("handle_s")
    if simulated or handled is None:
        return "slow"
    return "queued" if float(handled) <= deadline_s else "slow"


def kind_counts(failures: list[Failure]) -> dict[str, int]:
    """{"late": n, "errors": n, "rejected": n, "lost": n}: the round record's fields."""
    n = {k: sum(f.kind == k for f in failures) for k in ("late", "error", "rejected", "lost")}
    return {"late": n["late"], "errors": n["error"], "rejected": n["rejected"], "lost": n["lost"]}
