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
