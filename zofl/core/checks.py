"""Reply checks: a reply is used only if its arrays have the expected names and shapes, are real
float64 (``REPLY_DTYPE``), all finite and below ``reply-max-abs``."""
from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np

log = logging.getLogger("zofl")

# Every model and every reply of zofl is float64 (zofl.tasks.base: parameters are one flat float64 vector),
# so a reply of another dtype is corrupt, never cast: complex would make the global model complex,
# float16/integer/bool would be widened silently, object arrays are not numbers at all.
REPLY_DTYPE = np.dtype(np.float64)


def reply_problem(arrays: Mapping[str, np.ndarray] | list[np.ndarray],
                  shapes: Mapping[str, tuple[int, ...]] | list[tuple[int, ...]], max_abs: float,
                  num_examples: int | None = None) -> str | None:
    """Why a client's reply cannot be used, or None: wrong names or shapes, a dtype other than float64
    (complex, float16, integers, bool, objects), NaN/Inf, an absurd magnitude, or (when given) a count of
    examples below 1 (FedAvg's weights N_i: a negative one would take the mean outside its replies' hull,
    a zero sum would divide by zero)."""
    if num_examples is not None and not num_examples >= 1:
        return f"num-examples = {num_examples}, not a count >= 1"
    if isinstance(arrays, Mapping) != isinstance(shapes, Mapping):
        raise TypeError("arrays and shapes must both be named or both be lists")
    if isinstance(arrays, Mapping):
        got = {k: tuple(np.shape(a)) for k, a in arrays.items()}
        if got != {k: tuple(s) for k, s in shapes.items()}:
            return f"wrong arrays {got}, expected {dict(shapes)}"
        values = list(arrays.values())
    else:
        got = [a.shape for a in arrays]
        if got != list(shapes):
            return f"wrong shapes {got}, expected {shapes}"
        values = arrays
    names = list(arrays) if isinstance(arrays, Mapping) else [f"#{i}" for i in range(len(values))]
    wrong = {n: str(np.asarray(a).dtype) for n, a in zip(names, values) if np.asarray(a).dtype != REPLY_DTYPE}
    if wrong:
        return f"wrong dtype {wrong}, expected {REPLY_DTYPE} (replies are real float64, never cast)"
    if not all(np.isfinite(a).all() for a in values):
        return "NaN or Inf in the reply"
    biggest = max((float(np.abs(a).max()) for a in values if a.size), default=0.0)
    if biggest > max_abs:
        return f"absurd magnitude {biggest:.3g} > reply-max-abs = {max_abs:g}"
    return None


def finite_or_kept(new: dict[str, np.ndarray], fields: dict[str, Any], old: dict[str, np.ndarray],
                   step: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The state after a server step, or the one before it (its record marked ``model_rejected``) when the
    new global model x is not finite: a client fault never corrupts the global model. ``step`` names the
    step in the log ("round 3", "update 7")."""
    if np.all(np.isfinite(new["x"])):
        return new, fields
    log.error("%s: the aggregate is not finite; the global model stays", step)
    return old, {**fields, "model_rejected": True}
