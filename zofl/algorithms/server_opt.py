"""Server optimizers on a method's server step (run-config ``server-optimizer``): FedAvgM (Hsu et al., 2019) and
FedAdagrad / FedAdam / FedYogi (Reddi et al., ICLR 2021, "Adaptive Federated Optimization"), in numpy.

A method whose server step is x_{t+1} = x_t + lr_t * delta_t (FedAvg's delta = the weighted mean of the clients'
models minus x_t, FedBuff's the staleness-weighted mean of their updates, ZO-HFL's -(grad f1 + the two-point
estimate); lr_t its own step: server-lr, or gamma_r) hands delta_t to ``server_step``, which applies the chosen
optimizer with the method's lr_t as its eta:

  sgd       x + lr delta                                                  (the method's own step, bit for bit)
  momentum  v = beta v + (-delta) (v_1 = -delta),  x - lr v                 (Flower's FedAvgM, server_momentum = beta)
  adagrad   m = delta, v = v + delta^2,  x + lr m / (sqrt(v) + tau)          (Flower's FedAdagrad)
  adam      m = b1 m + (1 - b1) delta, v = b2 v + (1 - b2) delta^2,
            x + lr sqrt(1 - b2^(t+1)) / (1 - b1^(t+1)) m / (sqrt(v) + tau)    (Flower's FedAdam, t = Flower's round)
  yogi      m as adam, v = v - (1 - b2) delta^2 sign(v - delta^2),  x + lr m / (sqrt(v) + tau)  (Flower's FedYogi)

These are Flower 1.42's formulas (flwr.serverapp.strategy.fedavgm / fedadagrad / fedadam / fedyogi), checked
against those classes in tests/test_server_opt.py. Flower's classes themselves do not fit here: each is a whole
strategy that averages the clients' ArrayRecords itself and keeps its moments inside the strategy object, while
zofl's methods compute their own delta (an estimate, a buffered step) and keep all state in the checkpointed
``State``; so the formulas are written once here, and the moments live in the state (``OPT_STATE``).
"""
from __future__ import annotations

import numpy as np

OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "yogi")
OPT_STATE = ("opt_m", "opt_v")  # the moments in a method's state (checkpointed with it)


def init_state(kind: str, n: int) -> dict[str, np.ndarray]:
    """The optimizer's moments before the first step (none for sgd)."""
    return {} if kind == "sgd" else {"opt_m": np.zeros(n), "opt_v": np.zeros(n)}


def server_step(kind: str, x: np.ndarray, delta: np.ndarray, lr: float, t: int, state: dict[str, np.ndarray],
                momentum: float = 0.9, beta_1: float = 0.9, beta_2: float = 0.99, tau: float = 1e-3,
                count: int = 1) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(x_{t+1}, the new moments) of the step x_t + lr delta_t / count through optimizer ``kind`` (see the module
    docstring). ``t``: the 1-based number of the step (Flower's server_round: Adam's bias correction);
    ``count``: delta is a sum of that many updates (FedBuff's 1/K, kept as the method divides, so that sgd
    reproduces the method's own arithmetic)."""
    if kind == "sgd":
        return x + lr * delta / count if count != 1 else x + lr * delta, {}
    d = delta / count if count != 1 else delta
    m, v = state["opt_m"], state["opt_v"]
    if kind == "momentum":
        m = momentum * m - d  # Flower's momentum vector of pseudo-gradients old - new = -delta (v_1 = -delta)
        return x - lr * m, {"opt_m": m, "opt_v": v}
    if kind == "adagrad":
        m, v = d, v + d ** 2
        return x + lr * m / (np.sqrt(v) + tau), {"opt_m": m, "opt_v": v}
    m = beta_1 * m + (1 - beta_1) * d
    if kind == "adam":
        v = beta_2 * v + (1 - beta_2) * d ** 2
        eta = lr * np.sqrt(1 - np.power(beta_2, t + 1.0)) / (1 - np.power(beta_1, t + 1.0))
        return x + eta * m / (np.sqrt(v) + tau), {"opt_m": m, "opt_v": v}
    if kind == "yogi":
        v = v - (1.0 - beta_2) * d ** 2 * np.sign(v - d ** 2)
        return x + lr * m / (np.sqrt(v) + tau), {"opt_m": m, "opt_v": v}
    raise ValueError(f"server optimizer {kind!r} is not one of {OPTIMIZERS}")
