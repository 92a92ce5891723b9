"""The failure policy: when a run has failed, in the spirit of Flower's ``min_fit_clients`` and
``accept_failures`` (our choice; the papers assume every sampled client answers).

A round is *failed* when fewer than ``min-replies`` usable replies reach the server (the
asynchronous engine has no rounds: there a *window* is every ``num-clients`` finished tasks,
replies and failures together, i.e. one round's worth of client work). A run stops, as failed,
as soon as it can no longer meet the policy: once more than ``max-failed-rounds`` x R of its
rounds have failed, R being its number of rounds (async: the least number of windows its updates
need, ceil(updates x buffer-size / num-clients)). Stopping then, not at the end, is exact: the
fraction at the end would be above the bound whatever the remaining rounds do.
"""
from __future__ import annotations

import math


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
