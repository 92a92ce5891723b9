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
    f1(x) = (1/2)||x - a||^2
    f2(x, y) = (1/2)||(y - c)_+||^2 + (rho/2)||x||^2   (a one-sided penalty plus a term in x: not a distance)
    h_i(x, y) = (1/2)||y - S x - e_i||^2,  Y_i(x) = {y >= K x + b_i}  (a set of each client's own that moves with x)
      =>  y_i(x) = max(S x + e_i, K x + b_i)   (componentwise; S = diag(s), K = diag(kappa))
    The objective f1 + (1/m) sum_i f2(x, y_i(x)) is separable by coordinate. In coordinate j,
    z_ij(t) = max(s_j t + e_ij, kappa_j t + b_ij) is convex in t and phi(z) = (1/2)(z - c_j)_+^2 is
    convex and nondecreasing, so every phi(z_ij(t)) is convex and f1's term makes the sum strongly
    convex: x*_j is the unique point where the (nondecreasing) derivative
        (t - a_j) + rho t + (1/m) sum_i (z_ij(t) - c_j)_+ z_ij'(t)
    changes sign (``solution``, by bisection). e_i and b_i (client i's data) are drawn so that
    Y_i(x) binds for some (client, coordinate) pairs at x* and not for others: the problem without
    the constraint (``solution(project=False)``), or with a set that does not move with x
    (``solution(kappa=0)``), has another solution.
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

    def init_x(self, settings, spec: DataSpec) -> np.ndarray:
        return np.full(DIM, 2.0)

    def init_y(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(DIM)

    def project_x(self, x: np.ndarray, settings) -> np.ndarray:
        return x

    def _draw(self, spec: DataSpec):
        rng = np.random.default_rng(spec.seed)
        m = spec.num_clients
        A = np.eye(DIM) + 0.3 * rng.standard_normal((m, DIM, DIM))
        return A, rng.standard_normal((m, DIM)), rng.standard_normal((m, DIM))

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        x_star = self.solution(spec)
        return {"test_loss": self.implicit_objective(spec, x), "test_acc": float("nan"),
                "dist_to_solution": float(np.linalg.norm(x - x_star)),
                "y_error": float(np.linalg.norm(y - self.y_of(spec, x)))}


class QuadraticBilevel(_Toy):
    def client_problem(self, settings, spec: DataSpec, pid: int) -> ClientProblem:
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

    def client_upper(self, settings, spec: DataSpec, pid: int):
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

    Client i's data hold its instance: every row of ``client_data(spec, i).x`` is [e_i, b_i] (idx
    is ignored: no sample noise). ``loss``/``grad`` are f1 (the server's data are ignored too)."""

    dim = 3
    s = np.array([1.0, 2.0, 0.5])
    a = np.array([1.0, -1.0, 0.5])
    c = np.array([-0.5, 0.0, -1.0])
    kappa = np.array([1.0, -1.0, 1.5])
    rho = 0.1

    def _instances(self, spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
        """(e, b), each (m, 3): every client's lower-level target offset and constraint offset."""
        rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 0x48]))
        return rng.normal(scale=2.0, size=(spec.num_clients, self.dim)), \
            rng.normal(scale=2.0, size=(spec.num_clients, self.dim))

    def _rows(self, e: np.ndarray, b: np.ndarray) -> ArrayData:
        return ArrayData(np.tile(np.concatenate([e, b]).astype(np.float32), (4, 1)), np.zeros(4, dtype=np.int64), 2)

    # -- the task protocol (f1 on "data" that do not matter) --------------------------------
    def check(self, spec: DataSpec) -> None:
        pass

    def server_data(self, spec: DataSpec) -> ArrayData:
        return self._rows(np.zeros(self.dim), np.zeros(self.dim))

    def client_data(self, spec: DataSpec, pid: int) -> ArrayData:
        e, b = self._instances(spec)
        return self._rows(e[pid], b[pid])

    def test_data(self, spec: DataSpec) -> ArrayData:
        return self.server_data(spec)

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
    def hfl_f2(self, hp, x: np.ndarray, y: np.ndarray) -> float:
        over = np.maximum(y - self.c, 0.0)
        return 0.5 * float(over @ over) + 0.5 * self.rho * float(x @ x)

    def hfl_lower_grad(self, hp, data: ArrayData, x: np.ndarray, y: np.ndarray, idx) -> np.ndarray:
        return y - self.s * x - data.x[0, :self.dim].astype(np.float64)

    def hfl_project(self, hp, data: ArrayData, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.maximum(y, self.kappa * x + data.x[0, self.dim:].astype(np.float64))

    # -- the solution ----------------------------------------------------------------------------
    def _derivative(self, e, b, j: int, t: float, project: bool, kappa_j: float) -> float:
        free = self.s[j] * t + e[:, j]
        if project:
            bound = kappa_j * t + b[:, j]
            z, dz = np.maximum(free, bound), np.where(free >= bound, self.s[j], kappa_j)
        else:
            z, dz = free, np.full(len(free), self.s[j])
        return (t - self.a[j]) + self.rho * t + float(np.mean(np.maximum(z - self.c[j], 0.0) * dz))

    def solution(self, spec: DataSpec, project: bool = True, kappa: np.ndarray | None = None) -> np.ndarray:
        """x* (by bisection per coordinate); ``project=False``: without Y_i(x); ``kappa``: another K."""
        e, b = self._instances(spec)
        kappa = self.kappa if kappa is None else np.asarray(kappa, dtype=np.float64)
        out = np.empty(self.dim)
        for j in range(self.dim):
            lo, hi = -100.0, 100.0
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if self._derivative(e, b, j, mid, project, kappa[j]) < 0 else (lo, mid)
            out[j] = 0.5 * (lo + hi)
        return out

    def active_share(self, spec: DataSpec) -> float:
        """The share of (client, coordinate) pairs where y >= K x + b_i binds at x*."""
        e, b = self._instances(spec)
        x = self.solution(spec)
        return float(np.mean(self.kappa * x + b > self.s * x + e))
