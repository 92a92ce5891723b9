"""Tasks from torch models: any ``torch.nn.Module`` and loss, usable by every strategy.

The App's strategies see one flat float64 numpy vector of parameters (the papers' x in R^n). A
``TorchTask`` maps it to the module's parameters with ``torch.func.functional_call`` (the split
follows ``named_parameters()``, the order of ``torch.nn.utils.parameters_to_vector``) and takes
gradients with ``torch.func.grad``: no hand-written gradient, no module state between calls.

    from zofl.tasks.torch_task import TorchTask
    def make(num_features, num_classes):               # your model, from the data's sizes
        return torch.nn.Sequential(torch.nn.Linear(num_features, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, num_classes))
    TASK = TorchTask(make)                               # run-config: task = "mypackage.mymodule:TASK"

Built in: ``torch-softmax`` (the paper's linear softmax without bias, the same numbers as the numpy
``softmax`` task in float64) and ``cnn`` (a small convolutional network for images: MNIST,
Fashion-MNIST, CIFAR-10, digits; input shape from the number of features). The run-config key
``device`` picks ``cpu`` or ``cuda``. Computation is in float32 by default (``dtype``); the numpy
vector stays float64.

torch is an optional extra (``pip install -e '.[torch]'``): the default job and every numpy task run
without it, and a torch task asked for without it stops before round 1 naming the extra
(``require``).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..extras import require
from .base import SplitTask

IMAGE_SHAPES = {784: (1, 28, 28), 3072: (3, 32, 32), 64: (1, 8, 8)}  # MNIST / Fashion-MNIST, CIFAR-10, digits
def image_shape(num_features: int) -> tuple[int, int, int]:
    if num_features in IMAGE_SHAPES:
        return IMAGE_SHAPES[num_features]
    side = int(math.isqrt(num_features))
    if side * side == num_features:
        return 1, side, side
    raise ValueError(f"the cnn task needs images: {num_features} features is not a known image shape")


def softmax_module(num_features: int, num_classes: int):
    import torch

    return torch.nn.Linear(num_features, num_classes, bias=False)


def cnn_module(num_features: int, num_classes: int):
    """Two 3x3 convolutions (16, 32 channels) with ReLU, 2x2 max-pooling, then max-pooled to 4x4,
    then a linear layer: about 10k parameters on MNIST, a model that learns where a linear one cannot."""
    from torch import nn

    c, _, _ = image_shape(num_features)
    return nn.Sequential(nn.Unflatten(1, image_shape(num_features)),
                         nn.Conv2d(c, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(4),
                         nn.Flatten(), nn.Linear(32 * 16, num_classes))


class TorchTask(SplitTask):
    """A task from ``make_module(num_features, num_classes) -> torch.nn.Module`` and a loss
    ``loss_fn(logits, labels) -> scalar`` (default: cross-entropy), on the App's splits."""

    def __init__(self, make_module: Callable, loss_fn: Callable | None = None, dtype: str = "float32",
                 init_seed: int = 0, zero_init: bool = False, num_threads: int | None = 1):
        self.make_module, self.loss_fn, self.dtype_name = make_module, loss_fn, dtype
        self.num_threads = num_threads
        self.init_seed, self.zero_init = init_seed, zero_init
        self.device = "cpu"
        self._module = None
        self._shapes: list[tuple[str, tuple[int, ...]]] = []

    # -- run-config ------------------------------------------------------------------------
    def configure(self, settings, spec) -> None:
        """Called by ``zofl.setup.prepare`` in every process (server and clients) once the run-config
        is known: the ``device`` (cuda must be present) and the module, sized from the data."""
        torch = require("torch", f"task {type(self).__name__} (a torch task)")

        if settings.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("run-config key 'device': 'cuda' asked for, but torch sees no CUDA device here")
        self.device, self._module = settings.device, None
        if self.num_threads:
            # one thread per process: a simulated client gets one CPU (client-resources-num-cpus=1), and
            # torch's default of all cores made steps ~10x slower on a busy 2-core machine (measured)
            torch.set_num_threads(self.num_threads)
        test = self.test_data(spec)
        self._build(test.x.shape[1], test.num_classes)

    # -- the module and the flat vector -------------------------------------------------------
    def _built(self):
        if self._module is None:
            raise RuntimeError("TorchTask: the module is built by init_params(num_features, num_classes) or "
                               "configure(settings, spec) (zofl.setup.prepare calls it); neither has run")
        return self._module

    def _build(self, num_features: int, num_classes: int):
        import torch

        if self._module is None:
            torch.manual_seed(self.init_seed)
            module = self.make_module(num_features, num_classes)
            self._module = module.to(device=self.device, dtype=getattr(torch, self.dtype_name)).eval()
            self._shapes = [(name, tuple(p.shape)) for name, p in self._module.named_parameters()]
        return self._module

    def _params(self, flat: np.ndarray) -> dict:
        import torch

        return self._params_of(torch.as_tensor(flat, dtype=getattr(torch, self.dtype_name), device=self.device))

    def _batch(self, x: np.ndarray, y: np.ndarray | None = None):
        import torch

        xt = torch.as_tensor(np.ascontiguousarray(x), device=self.device).to(getattr(torch, self.dtype_name))
        return xt, None if y is None else torch.as_tensor(y, dtype=torch.long, device=self.device)

    def _loss(self, logits, labels):
        import torch.nn.functional as F

        return (self.loss_fn or F.cross_entropy)(logits, labels)

    # -- the Task protocol ------------------------------------------------------------------------
    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        import torch

        module = self._build(num_features, num_classes)
        flat = torch.nn.utils.parameters_to_vector(module.parameters()).detach().cpu().double().numpy()
        return np.zeros_like(flat) if self.zero_init else flat

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        import torch
        from torch.func import functional_call

        module = self._built()
        xt, yt = self._batch(x, y)
        with torch.no_grad():
            return float(self._loss(functional_call(module, self._params(params), (xt,)), yt))

    def grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        import torch
        from torch.func import functional_call, grad

        module = self._built()
        xt, yt = self._batch(x, y)
        flat = torch.as_tensor(params, dtype=getattr(torch, self.dtype_name), device=self.device)

        def loss_of(v):
            return self._loss(functional_call(module, self._params_of(v), (xt,)), yt)

        return grad(loss_of)(flat).detach().cpu().double().numpy()

    def _params_of(self, t) -> dict:
        """The module's parameters as views of the flat tensor t (in named_parameters order)."""
        out, i = {}, 0
        for name, shape in self._shapes:
            n = math.prod(shape)
            out[name] = t[i:i + n].view(shape)
            i += n
        return out

    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        import torch
        from torch.func import functional_call

        module = self._built()
        xt, _ = self._batch(x)
        with torch.no_grad():
            return functional_call(module, self._params(params), (xt,)).argmax(dim=1).cpu().numpy()


class TorchSoftmaxTask(TorchTask):
    """The paper's linear softmax (no bias) in torch: x_0 = 0, float64, the numpy task's numbers.

    torch's Linear stores W as (C, d); the App's vector is the numpy task's (d, C) row-major, so
    the parameter is the transpose (handled here, so both tasks share checkpoints and numbers)."""

    def __init__(self):
        super().__init__(softmax_module, dtype="float64", zero_init=True)

    def _params_of(self, t) -> dict:
        d_c = self._shapes[0][1]  # (C, d)
        return {self._shapes[0][0]: t.view(d_c[1], d_c[0]).T}

    def _params(self, flat: np.ndarray) -> dict:
        import torch

        return self._params_of(torch.as_tensor(flat, dtype=torch.float64, device=self.device))


class CNNTask(TorchTask):
    """A small convolutional network (``cnn_module``) for the image datasets."""

    def __init__(self):
        super().__init__(cnn_module)
