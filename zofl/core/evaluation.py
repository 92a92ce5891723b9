"""Evaluation of a model on the server: test accuracy and loss, and f1 (the loss on the server's data)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tasks import evaluate


def model_metrics(task, x: np.ndarray, test_data, server_data) -> dict[str, Any]:
    test_loss, test_acc = evaluate(task, x, test_data)
    f1 = float(task.loss(x, server_data.x, server_data.y)) if len(server_data) else 0.0
    return {"test_acc": test_acc, "test_loss": test_loss, "f1": f1}
