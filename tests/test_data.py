"""The data layer: loading, the paper's splits, Dirichlet partitions."""
import numpy as np
import pytest

from zofl.tasks.data import DataError, check_available, dirichlet_partition, load_pooled, make_splits


def _label_dists(labels, parts, C=10):
    return np.array([np.bincount(labels[p], minlength=C) / max(len(p), 1) for p in parts])


def test_splits_add_up_and_are_disjoint():
    s = make_splits("digits", 7, 1.0, 0.3, 0)
    everything = np.concatenate([s.test, s.server, *s.clients])
    n = len(load_pooled("digits").y)
    assert len(everything) == n and len(np.unique(everything)) == n  # a partition of all examples
    assert len(s.test) == round(0.1 * n)
    assert len(s.server) == round(0.3 * (n - len(s.test)))
    assert s.num_train == n - len(s.test)
    assert len(s.clients) == 7 and min(len(c) for c in s.clients) >= 10


def test_splits_are_deterministic():
    a = make_splits.__wrapped__("digits", 5, 0.5, 0.3, 3)
    b = make_splits.__wrapped__("digits", 5, 0.5, 0.3, 3)
    c = make_splits.__wrapped__("digits", 5, 0.5, 0.3, 4)
    for u, v in zip((a.test, a.server, *a.clients), (b.test, b.server, *b.clients)):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a.server, c.server)


def test_large_alpha_is_near_iid_and_small_alpha_is_skewed():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 20_000)
    glob = np.bincount(labels, minlength=10) / len(labels)
    iid = _label_dists(labels, dirichlet_partition(labels, 10, 1000.0, 0, 10))
    skew = _label_dists(labels, dirichlet_partition(labels, 10, 0.1, 0, 10))
    tv = lambda d: 0.5 * np.abs(d - glob).sum(axis=1)  # noqa: E731  total variation to the global mix
    assert tv(iid).max() < 0.05
    assert tv(skew).mean() > 0.4
    sizes = [len(p) for p in dirichlet_partition(labels, 10, 0.1, 0, 10)]
    assert sum(sizes) == len(labels)


def test_npz_loading(fake_npz_dir):
    p = load_pooled("mnist", str(fake_npz_dir))
    assert p.x.shape == (1000, 784) and p.x.dtype == np.float32
    assert 0.0 <= p.x.min() and p.x.max() <= 1.0
    assert p.num_classes == 10


def test_missing_file_names_the_file_and_both_ways(tmp_path):
    with pytest.raises(DataError) as e:
        check_available("fashion_mnist", str(tmp_path), download=False)
    msg = str(e.value)
    assert str(tmp_path / "fashion_mnist.npz") in msg
    assert "prepare.py" in msg and "download=true" in msg


def test_unknown_dataset():
    with pytest.raises(DataError, match="dataset must be one of"):
        check_available("imagenet", "/tmp", False)


def test_download_writes_a_keras_style_npz(tmp_path, monkeypatch):
    """The torchvision path, with torchvision's dataset class replaced (no network here)."""
    import torchvision

    from zofl.tasks import data

    calls = []

    class FakeMNIST:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            n = 30 if train else 10
            self.data = np.full((n, 28, 28), 7, np.uint8)
            self.targets = np.arange(n) % 10

    monkeypatch.setattr(torchvision.datasets, "MNIST", FakeMNIST)
    out = data.download_npz("mnist", tmp_path)
    assert out == tmp_path / "mnist.npz" and all(c[2] for c in calls) and len(calls) == 2
    with np.load(out) as f:
        assert f["x_train"].shape == (30, 28, 28) and f["y_test"].shape == (10,) and f["x_test"].dtype == np.uint8
    check_available("mnist", str(tmp_path), download=False)  # now found


def test_cifar_shaped_npz_is_flattened(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cifar10.npz", x_train=rng.integers(0, 255, (50, 32, 32, 3), dtype=np.uint8),
             y_train=rng.integers(0, 10, (50, 1)).astype(np.uint8),
             x_test=rng.integers(0, 255, (10, 32, 32, 3), dtype=np.uint8),
             y_test=rng.integers(0, 10, (10, 1)).astype(np.uint8))
    p = load_pooled("cifar10", str(tmp_path))
    assert p.x.shape == (60, 3072) and p.y.shape == (60,)


def test_covtype_fetched_with_scikit_learn_and_scaled(tmp_path, monkeypatch):
    """Covertype (paper 002, Sec. 5.2): fetch_covtype replaced (no network here); columns scaled to
    [0, 1] by their min and max, cover types 1..7 -> 0..6; a missing file names download=true."""
    import sklearn.datasets

    with pytest.raises(DataError, match="download=true"):
        check_available("covtype", str(tmp_path), download=False)
    rng = np.random.default_rng(0)
    x = np.hstack([rng.uniform(1800, 3900, (70, 1)), rng.integers(0, 2, (70, 53))])
    y = np.arange(70) % 7 + 1
    calls = []

    def fake_fetch(data_home, download_if_missing):
        calls.append((data_home, download_if_missing))
        return sklearn.datasets._base.Bunch(data=x, target=y)

    monkeypatch.setattr(sklearn.datasets, "fetch_covtype", fake_fetch)
    p = load_pooled("covtype", str(tmp_path), True)
    assert calls == [(str(tmp_path / "sklearn"), True)] and (tmp_path / "covtype.npz").is_file()
    assert p.x.shape == (70, 54) and p.x.min() == 0.0 and p.x.max() == 1.0 and p.num_classes == 7
    np.testing.assert_allclose(p.x[:, 0], (x[:, 0] - x[:, 0].min()) / np.ptp(x[:, 0]), atol=1e-6)
    assert sorted(set(p.y.tolist())) == list(range(7))
    check_available("covtype", str(tmp_path), download=False)  # now found


def test_the_run_config_accepts_every_dataset_the_data_layer_has():
    from zofl import config
    from zofl.tasks import data

    assert config.DATASETS == data.DATASETS
    assert config.parse_config({"dataset": "covtype", "strategy": "fednest", "task": "regularization"}).dataset \
        == "covtype"


def test_standardize_scales_by_the_training_rows_only():
    from zofl.tasks import DataSpec, SplitTask

    t = SplitTask()
    raw, std = DataSpec(num_clients=4), DataSpec(num_clients=4, standardize=True)
    train = np.vstack([t.server_data(std).x] + [t.client_data(std, i).x for i in range(4)]).astype(np.float64)
    varying = train.std(axis=0) > 0
    np.testing.assert_allclose(train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(train.std(axis=0)[varying], 1, rtol=1e-4)
    # the test rows get the training rows' scaling (their own mean is not 0)
    raw_train = np.vstack([t.server_data(raw).x] + [t.client_data(raw, i).x for i in range(4)]).astype(np.float64)
    mean, sd = raw_train.mean(axis=0), np.where(raw_train.std(axis=0) > 1e-8, raw_train.std(axis=0), 1.0)
    np.testing.assert_allclose(t.test_data(std).x, (t.test_data(raw).x - mean) / sd, atol=1e-4)
    np.testing.assert_array_equal(t.test_data(std).y, t.test_data(raw).y)
