"""Evaluation of a model: on the server (test accuracy and loss, and f1, the loss on the server's data: in the
records ``server_eval_due`` names, every ``eval-every`` rounds and the last), and federated (issue 48): every
client evaluates x_r on its own held-out data and the server weights the answers by their examples, as Flower's
strategies weight ``num-examples``.

Federated evaluation, in the order a round does it (``SyncRun``; the engines send Flower's ``evaluate`` messages):
``fed_eval_due`` (every ``eval-every`` rounds and the last), each client's answer checked (``eval_problem``: a
client is untrusted, an answer that fails is refused alone and counted), the accepted ones combined
(``weighted_metrics``) into the record's ``fed_loss``, ``fed_acc``, ``fed_examples``, ``fed_clients`` and
``fed_refused``. What the server learns of a client here is its examples count and two numbers: no row, no label.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tasks import evaluate
from .protocol import MAX_EXAMPLES


def model_metrics(task, x: np.ndarray, test_data, server_data) -> dict[str, Any]:
    test_loss, test_acc = evaluate(task, x, test_data)
    f1 = float(task.loss(x, server_data.x, server_data.y)) if len(server_data) else 0.0
    return {"test_acc": test_acc, "test_loss": test_loss, "f1": f1}


@dataclass(frozen=True)
class EvalAnswer:
    """One client's federated evaluation of x_r: its held-out examples, mean loss and accuracy on them."""

    pid: int
    num_examples: int
    loss: float
    acc: float


def server_eval_due(k: int, every: int, total: int) -> bool:
    """Whether the record of round ``k`` holds the server's evaluation (its test pass: ``Method.metrics``, run-config
    eval-every): x_0 (``k`` = 0), every ``every`` rounds, and the last (``total``) always, so that a run's final
    model is evaluated. The other records hold those fields as null (``zofl.core.record``)."""
    return k % every == 0 or k == total


def fed_eval_due(k: int, every: int, total: int) -> bool:
    """Whether round ``k`` (1-based; 0 is x_0, never evaluated by the clients) ends with a federated evaluation:
    the rounds the server evaluates (``server_eval_due``) but x_0."""
    return 1 <= k and server_eval_due(k, every, total)


def eval_problem(num_examples: Any, loss: Any, acc: Any) -> str | None:
    """Why a client's evaluation answer cannot be used (None: it can): an integer count in [0, MAX_EXAMPLES], a
    finite loss >= 0 and an accuracy in [0, 1] (a count of 0 is an answer with nothing to weight)."""
    if isinstance(num_examples, bool) or not isinstance(num_examples, (int, np.integer)) \
            or not 0 <= int(num_examples) <= MAX_EXAMPLES:
        return f"num-examples must be an integer in [0, {MAX_EXAMPLES}], got {str(num_examples)[:40]!r}"
    for name, value, hi in (("eval_loss", loss, math.inf), ("eval_acc", acc, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                or not math.isfinite(float(value)) or not 0.0 <= float(value) <= hi:
            return f"{name} must be a finite number in [0, {hi:g}], got {str(value)[:40]!r}"
    return None


def weighted_metrics(answers: list[EvalAnswer], refused: int = 0) -> dict[str, Any]:
    """The record's federated fields: loss and accuracy averaged over the answers weighted by their examples
    (sum_i n_i v_i / sum_i n_i; None when no answer has an example), the examples and clients counted, and the
    answers refused."""
    n = sum(a.num_examples for a in answers)
    loss = sum(a.num_examples * a.loss for a in answers) / n if n else None
    acc = sum(a.num_examples * a.acc for a in answers) / n if n else None
    return {"fed_loss": loss, "fed_acc": acc, "fed_examples": n,
            "fed_clients": sum(a.num_examples > 0 for a in answers), "fed_refused": refused}
