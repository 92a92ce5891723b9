"""Small bilevel and minimax problems with closed-form solutions, for tests and as examples of a task.

Run either with ``task = "zofl.tasks.toy:QuadraticBilevel"`` (or ``:SaddlePoint``) and
``strategy = "fedrzo-bl"``. The data are m random problem instances drawn from ``seed``; there is
no sample noise (``idx`` is ignored), so what remains is the zeroth-order and lower-level error.

QuadraticBilevel (n = n~ = 2):
    h_i(x, y) = (1/2)||y - A_i x - b_i||^2   =>  y(x) = A x + b        (A, b the means over clients)
    f_i(x, y) = (1/2)||y - c_i||^2 + (rho/2)||x||^2
    F(x) = f(x, y(x))  =>  x* = -(A^T A + rho I)^{-1} A^T (b - c)
SaddlePoint (min_x max_y, n = n~ = 2), h_i = -f_i:
    f_i(x, y) = (a_i/2)||x - c_i||^2 + y^T B_i x - (lam/2)||y||^2
    y(x) = B x / lam,  x* = (a I + B^T B / lam)^{-1} (mean a_i c_i),  y* = B x* / lam

HierarchicalQuadratic (ZO-HFL's problem (1) with its own f2, h_i and Y_i(x); ``strategy = "zohfl"``,
``task = "zofl.tasks.toy:HierarchicalQuadratic"``; n = 3):
    f1(x) = (1/2)||x - a||^2,   f2(x, y) = (1/2)||y - c||^2  (a function of y alone, not a distance)
    h_i(x, y) = (1/2)||y - S x - e_i||^2,  Y_i(x) = {y >= 0}  =>  y_i(x) = max(S x + e_i, 0)
    S = diag(s). The objective f1 + (1/m) sum_i f2(x, y_i(x)) is separable by coordinate, and in
    coordinate j its derivative (x_j - a_j) + (1/m) sum_{i: s_j x_j + e_ij > 0} s_j (s_j x_j + e_ij - c_j)
    increases strictly when c <= 0 (where client i's term switches on, it jumps by -s_j c_j >= 0),
    so x* is its unique zero (``solution``, by bisection). The e_i are drawn so
    that the constraint y >= 0 is active for some clients at x*: without the projection the
    solution would be another point (``unconstrained_solution``).
"""
from __future__ import annotations

import numpy as np

from .base import DataSpec
from .bilevel import ClientProblem, MinimaxTask
from .data import ArrayData

DIM = 2


def _empty() -> ArrayData:
    return ArrayData(np.zeros((0, DIM), dtype=np.float32), np.zeros(0, dtype=np.int64), 2)


class _Toy:
    rho = 0.5

    def check(self, spec: DataSpec) -> None:
        pass

    def server_data(self, spec: DataSpec) -> ArrayData:
        return _empty()

    def test_data(self, spec: DataSpec) -> ArrayData:
        return _empty()

    def num_train(self, spec: DataSpec) -> int:
        return spec.num_clients

    def dims(self, spec: DataSpec) -> tuple[int, int]:
        return DIM, DIM

    def init_x(self, spec: DataSpec) -> np.ndarray:
        return np.full(DIM, 2.0)

    def init_y(self, spec: DataSpec) -> np.ndarray:
        return np.zeros(DIM)

    def project_x(self, x: np.ndarray, cfg) -> np.ndarray:
        return x

    def _draw(self, spec: DataSpec):
        rng = np.random.default_rng(spec.seed)
        m = spec.num_clients
        A = np.eye(DIM) + 0.3 * rng.standard_normal((m, DIM, DIM))
        return A, rng.standard_normal((m, DIM)), rng.standard_normal((m, DIM))

    def evaluate(self, cfg, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        x_star = self.solution(spec)
        return {"test_loss": self.implicit_objective(spec, x), "test_acc": float("nan"),
                "dist_to_solution": float(np.linalg.norm(x - x_star)),
                "y_error": float(np.linalg.norm(y - self.y_of(spec, x)))}


class QuadraticBilevel(_Toy):
    def client_problem(self, cfg, spec: DataSpec, pid: int) -> ClientProblem:
        A, b, c = self._draw(spec)
        Ai, bi, ci, rho = A[pid], b[pid], c[pid], self.rho

        def f(x, y, idx):
            return 0.5 * float((y - ci) @ (y - ci)) + 0.5 * rho * float(x @ x)

        def lower_grad(x, y, idx):
            return y - Ai @ x - bi

        return ClientProblem(f, 1, lower_grad, 1, 1)

    def y_of(self, spec: DataSpec, x: np.ndarray) -> np.ndarray:
        A, b, _ = self._draw(spec)
        return A.mean(0) @ x + b.mean(0)

    def implicit_objective(self, spec: DataSpec, x: np.ndarray) -> float:
        _, _, c = self._draw(spec)
        y = self.y_of(spec, x)
        return float(np.mean([0.5 * (y - ci) @ (y - ci) for ci in c]) + 0.5 * self.rho * x @ x)

    def solution(self, spec: DataSpec) -> np.ndarray:
        A, b, c = self._draw(spec)
        Am = A.mean(0)
        return -np.linalg.solve(Am.T @ Am + self.rho * np.eye(DIM), Am.T @ (b.mean(0) - c.mean(0)))


class SaddlePoint(MinimaxTask, _Toy):
    lam = 1.0

    def _abc(self, spec: DataSpec):
        B, c, a = self._draw(spec)
        return 1.0 + np.abs(a[:, 0]), B, c  # a_i > 0

    def client_upper(self, cfg, spec: DataSpec, pid: int):
        a, B, c = self._abc(spec)
        ai, Bi, ci, lam = a[pid], B[pid], c[pid], self.lam

        def f(x, y, idx):
            return 0.5 * ai * float((x - ci) @ (x - ci)) + float(y @ Bi @ x) - 0.5 * lam * float(y @ y)

        def grad_y_f(x, y, idx):
            return Bi @ x - lam * y

        return f, grad_y_f, 1, 1

    def y_of(self, spec: DataSpec, x: np.ndarray) -> np.ndarray:
        _, B, _ = self._abc(spec)
        return B.mean(0) @ x / self.lam

    def implicit_objective(self, spec: DataSpec, x: np.ndarray) -> float:
        a, B, c = self._abc(spec)
        y = self.y_of(spec, x)
        return float(np.mean([0.5 * ai * (x - ci) @ (x - ci) + y @ Bi @ x for ai, Bi, ci in zip(a, B, c)])
                     - 0.5 * self.lam * y @ y)

    def solution(self, spec: DataSpec) -> np.ndarray:
        a, B, c = self._abc(spec)
        Bm = B.mean(0)
        return np.linalg.solve(a.mean() * np.eye(DIM) + Bm.T @ Bm / self.lam, (a[:, None] * c).mean(0))


class HierarchicalQuadratic:
    """ZO-HFL's problem (1) with hooks for f2, grad_y h_i and Y_i(x) (see the module docstring).

    Client i's data hold its instance: every row of ``client_data(spec, i).x`` is e_i (idx is
    ignored: no sample noise). ``loss``/``grad`` are f1 (the server's data are ignored too)."""

    dim = 3
    s = np.array([1.0, 2.0, 0.5])
    a = np.array([1.0, -1.0, 0.5])
    c = np.array([-0.5, 0.0, -1.0])  # c <= 0 keeps f convex (see the module docstring)

    def _e(self, spec: DataSpec) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 0x48]))
        return rng.normal(scale=2.0, size=(spec.num_clients, self.dim))

    def _rows(self, values: np.ndarray) -> ArrayData:
        return ArrayData(np.tile(values.astype(np.float32), (4, 1)), np.zeros(4, dtype=np.int64), 2)

    # -- the task protocol (f1 on "data" that do not matter) --------------------------------
    def check(self, spec: DataSpec) -> None:
        pass

    def server_data(self, spec: DataSpec) -> ArrayData:
        return self._rows(np.zeros(self.dim))

    def client_data(self, spec: DataSpec, pid: int) -> ArrayData:
        return self._rows(self._e(spec)[pid])

    def test_data(self, spec: DataSpec) -> ArrayData:
        return self._rows(np.zeros(self.dim))

    def num_train(self, spec: DataSpec) -> int:
        return 4 * (spec.num_clients + 1)

    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        return np.zeros(self.dim)

    def loss(self, params, x, y) -> float:
        return 0.5 * float((params - self.a) @ (params - self.a))

    def grad(self, params, x, y) -> np.ndarray:
        return params - self.a

    def predict(self, params, x) -> np.ndarray:
        return np.zeros(len(x), dtype=np.int64)

    # -- ZO-HFL's hooks -----------------------------------------------------------------------
    def hfl_f2(self, cfg, x: np.ndarray, y: np.ndarray) -> float:
        return 0.5 * float((y - self.c) @ (y - self.c))

    def hfl_lower_grad(self, cfg, data: ArrayData, x: np.ndarray, y: np.ndarray, idx) -> np.ndarray:
        return y - self.s * x - data.x[0].astype(np.float64)

    def hfl_project(self, cfg, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.maximum(y, 0.0)

    # -- the solution ----------------------------------------------------------------------------
    def _derivative(self, e: np.ndarray, j: int, t: float, project: bool = True) -> float:
        z = self.s[j] * t + e[:, j]
        active = z > 0 if project else np.ones(len(z), bool)
        return (t - self.a[j]) + float(np.sum(self.s[j] * (z - self.c[j]) * active)) / len(z)

    def solution(self, spec: DataSpec, project: bool = True) -> np.ndarray:
        e = self._e(spec)
        out = np.empty(self.dim)
        for j in range(self.dim):
            lo, hi = -100.0, 100.0
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if self._derivative(e, j, mid, project) < 0 else (lo, mid)
            out[j] = 0.5 * (lo + hi)
        return out

    def unconstrained_solution(self, spec: DataSpec) -> np.ndarray:
        return self.solution(spec, project=False)

    def active_share(self, spec: DataSpec) -> float:
        """The share of (client, coordinate) pairs where y >= 0 binds at x*."""
        return float(np.mean(self.s * self.solution(spec) + self._e(spec) <= 0))
