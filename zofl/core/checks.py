"""Reply checks: a reply is used only if its arrays have the expected names and shapes, are all
finite and stay below ``reply-max-abs``."""
from __future__ import annotations

from typing import Mapping

import numpy as np


def reply_problem(arrays: Mapping[str, np.ndarray] | list[np.ndarray],
                  shapes: Mapping[str, tuple[int, ...]] | list[tuple[int, ...]], max_abs: float) -> str | None:
    """Why a client's reply cannot be used, or None: wrong names or shapes, NaN/Inf, or an absurd magnitude."""
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
    if not all(np.issubdtype(np.asarray(a).dtype, np.number) for a in values):
        return "non-numeric arrays in the reply"
    if not all(np.isfinite(a).all() for a in values):
        return "NaN or Inf in the reply"
    biggest = max((float(np.abs(a).max()) for a in values if a.size), default=0.0)
    if biggest > max_abs:
        return f"absurd magnitude {biggest:.3g} > reply-max-abs = {max_abs:g}"
    return None
