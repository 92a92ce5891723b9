import numpy as np
import pytest


@pytest.fixture
def fake_npz_dir(tmp_path):
    """A tiny Keras-style mnist.npz (random 28x28 uint8 images with label-dependent means)."""
    rng = np.random.default_rng(0)

    def make(n):
        y = rng.integers(0, 10, n).astype(np.uint8)
        x = (rng.integers(0, 60, (n, 28, 28)) + y[:, None, None] * 19).astype(np.uint8)
        return x, y

    xtr, ytr = make(900)
    xte, yte = make(100)
    np.savez(tmp_path / "mnist.npz", x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    return tmp_path
