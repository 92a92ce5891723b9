"""The data layer: loading, the paper's splits, Dirichlet partitions."""
import re

import numpy as np
import pytest

from zofl.tasks.data import (
    DataError,
    _load_pooled,
    _make_splits,
    check_available,
    dirichlet_partition,
    load_pooled,
    make_splits,
)


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
    a = _make_splits.__wrapped__("digits", 5, 0.5, 0.3, 3, "", False, 10, (), "top-up")  # uncached: computed twice
    b = _make_splits.__wrapped__("digits", 5, 0.5, 0.3, 3, "", False, 10, (), "top-up")
    c = _make_splits.__wrapped__("digits", 5, 0.5, 0.3, 4, "", False, 10, (), "top-up")
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
    assert "zofl data get fashion_mnist" in msg and "--from" in msg and "download=true" in msg
    assert "\n" not in msg  # one line, as every refusal


def test_unknown_dataset():
    with pytest.raises(DataError, match="dataset must be one of"):
        check_available("imagenet", "/tmp", False)


def _stand_in_torchvision(monkeypatch, **classes):
    """A torchvision module whose ``datasets`` hold ``classes``: the tests need torch, not torchvision (its one
    use here, a download, needs a network; the [test] extra does not install it)."""
    import sys
    import types

    tv = types.ModuleType("torchvision")
    tv.datasets = types.SimpleNamespace(**{"MNIST": None, "FashionMNIST": None, "CIFAR10": None, **classes})
    monkeypatch.setitem(sys.modules, "torchvision", tv)


def test_download_writes_a_keras_style_npz(tmp_path, monkeypatch):
    """The torchvision path, with torchvision's dataset class replaced (no network here)."""
    from zofl.tasks import data

    calls = []

    class FakeMNIST:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            n = 30 if train else 10
            self.data = np.full((n, 28, 28), 7, np.uint8)
            self.targets = np.arange(n) % 10

    _stand_in_torchvision(monkeypatch, MNIST=FakeMNIST)
    out = data.download_npz("mnist", tmp_path)
    assert out == tmp_path / "mnist.npz" and all(c[2] for c in calls) and len(calls) == 2
    with np.load(out) as f:
        assert f["x_train"].shape == (30, 28, 28) and f["y_test"].shape == (10,) and f["x_test"].dtype == np.uint8
    check_available("mnist", str(tmp_path), download=False)  # now found


def test_an_offline_download_is_one_line_naming_the_offline_way(tmp_path, monkeypatch, capsys):
    """Issue 47: offline, torchvision raises RuntimeError('Error downloading ...'); `zofl data get` printed a
    traceback and exited 1. Now one line (as covtype's), exit 2, and nothing written."""
    from zofl.cli import main

    class Offline:
        def __init__(self, root, train, download):
            raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://... got URLError")

    _stand_in_torchvision(monkeypatch, FashionMNIST=Offline)
    assert main(["data", "get", "fashion_mnist", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(
        "zofl data: error: dataset 'fashion_mnist': torchvision's download failed (RuntimeError: Error downloading "
        "train-images-idx3-ubyte.gz: Tried https://... got URLError); "), err
    assert "zofl data get fashion_mnist --data-dir" in err and "--from" in err
    assert not (tmp_path / "fashion_mnist.npz").exists()


def test_a_torchvision_that_does_not_import_is_named_not_a_traceback(monkeypatch):
    """A torchvision built for another torch raises RuntimeError at import (this machine's PyPI torchvision
    beside its CPU-only torch: 'operator torchvision::nms does not exist'): one line naming it and the extra."""
    import importlib
    import sys

    from zofl.tasks import data

    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    real = importlib.import_module

    def broken(name, *a):
        if name == "torchvision":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(DataError) as e:
        data.download_npz("mnist", "/nonexistent")
    assert str(e.value) == (
        "downloading 'mnist' needs torchvision, which is installed but does not import (RuntimeError: operator "
        "torchvision::nms does not exist): install the release pyproject.toml pins for this torch (pip install -e "
        "'.[torch,download]' in the project's folder (or pip install 'zofl[torch,download]')); or convert the "
        "original files you have: zofl data get mnist --from FOLDER")


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
    y = (np.arange(70) % 7 + 1).astype(np.int32)  # as scikit-learn gives them: int32 labels, float64 features
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
    with np.load(tmp_path / "covtype.npz") as f:  # stored as fetched: float32 features, int64 labels
        assert f["x"].dtype == np.float32 and f["y"].dtype == np.int64


def test_covtype_fetched_into_a_new_folder_or_its_failure_named(tmp_path, monkeypatch):
    import sklearn.datasets

    from zofl.tasks.data import download_covtype, missing_file_message

    bunch = sklearn.datasets._base.Bunch(data=np.ones((7, 54)), target=np.arange(7) + 1)
    monkeypatch.setattr(sklearn.datasets, "fetch_covtype", lambda data_home, download_if_missing: bunch)
    deep = tmp_path / "a" / "b"
    assert download_covtype(deep) == deep / "covtype.npz" and (deep / "covtype.npz").is_file()

    def offline(data_home, download_if_missing):
        raise OSError("network unreachable")

    monkeypatch.setattr(sklearn.datasets, "fetch_covtype", offline)
    with pytest.raises(DataError) as info:
        download_covtype(tmp_path / "c")
    assert str(info.value) == (f"dataset 'covtype': scikit-learn's fetch_covtype failed (network unreachable); "
                               f"{missing_file_message(tmp_path / 'c', 'covtype')}")


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


def _keras(tmp_path, name="mnist", **change):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 255, (40, 28, 28), dtype=np.uint8), "y_train": np.arange(40) % 10,
              "x_test": rng.integers(0, 255, (10, 28, 28), dtype=np.uint8), "y_test": np.arange(10) % 10}
    arrays.update(change)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(tmp_path / f"{name}.npz", **arrays)
    _load_pooled.cache_clear()
    return str(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"y_train": np.arange(40) % 10 + 10}, r"must lie in \[0, 10\), found 10..19"),
    ({"y_train": np.arange(40) % 10 - 3}, r"must lie in \[0, 10\), found -3..6"),
    ({"y_train": np.eye(10, dtype=np.uint8)[np.arange(40) % 10]}, "look one-hot"),
    ({"y_train": (np.arange(40) % 10).astype(np.float32)}, "must be integers"),
    ({"y_train": np.arange(39) % 10}, "'train' has 40 examples but 39 labels"),
    ({"y_train": np.zeros(40, dtype=np.int64)}, "single class"),
    ({"x_train": np.full((40, 28, 28), np.nan)}, "NaN or infinite values"),
    ({"x_test": np.zeros((10, 32, 32), dtype=np.uint8)}, "differ in shape between parts"),
    ({"x_train": np.array([object()] * 40, dtype=object)}, r"'x_train.npy': holds Python objects \(dtype object\)"),
    ({"y_test": None}, r"missing \['y_test'\]"),
    ({"extra": np.zeros(3)}, r"extra \['extra'\]"),
])
def test_bad_data_is_refused_by_name(tmp_path, change, message):
    d = _keras(tmp_path, **change)
    with pytest.raises(DataError, match=message) as e:
        load_pooled("mnist", d)
    assert str(tmp_path / "mnist.npz") in str(e.value)


def test_unreadable_files_are_refused_by_name(tmp_path):
    d = _keras(tmp_path)
    good = (tmp_path / "mnist.npz").read_bytes()
    (tmp_path / "mnist.npz").write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(DataError, match="cannot be read as a .npz file"):
        load_pooled("mnist", d)
    _load_pooled.cache_clear()
    (tmp_path / "mnist.npz").write_text("not a zip at all")
    with pytest.raises(DataError, match=r"mnist.npz: is not a .npz file \(a zip archive of .npy arrays\); it starts "
                                        r"with b'not a zip at all'"):
        load_pooled("mnist", d)
    _load_pooled.cache_clear()
    _keras(tmp_path, y_train=(np.arange(40) % 10).reshape(40, 1).astype(np.uint8))  # Keras CIFAR style: fine
    assert load_pooled("mnist", d).y.shape == (50,)


def test_bad_data_fails_the_run_before_round_1_with_the_key(tmp_path):
    from zofl.config import ConfigError
    from zofl.setup import prepare

    d = _keras(tmp_path, y_train=np.arange(40) % 10 + 10)
    with pytest.raises(ConfigError, match=r"^run-config key 'data-dir' \(dataset 'mnist'\): .*mnist\.npz: labels of "
                                          r"'train' must lie in \[0, 10\)"):
        prepare({"dataset": "mnist", "data-dir": d, "num-clients": 2})


def test_output_dir_and_run_name_are_checked(tmp_path):
    from zofl.config import ConfigError, parse_config
    from zofl.server_app import make_run

    for bad in ("a\nb", ".hidden", "x y", "../up", "a/b"):
        with pytest.raises(ConfigError, match="'run-name'"):
            parse_config({"run-name": bad})
    parse_config({"run-name": "zohfl-mnist_2.v1"})
    (tmp_path / "a-file").write_text("")  # a results folder below a file cannot exist, whoever runs this
    with pytest.raises(ConfigError, match="'output-dir': cannot write"):
        make_run({"output-dir": str(tmp_path / "a-file" / "results"), "run-name": "r", "num-rounds": 1})


# -- issue 30: files that are not what they claim --------------------------------------------------

def _npz_with_header(path, shape, descr="|u1", data=b"\0" * 16, keys=("x_train", "y_train", "x_test", "y_test")):
    """A zip of .npy members whose header says ``shape`` of ``descr`` whatever data follow it."""
    import io
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": descr, "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as z:
        for k in keys:
            z.writestr(f"{k}.npy", head.getvalue() + data)
    _load_pooled.cache_clear()


def test_an_npz_header_claiming_713_tib_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    """numpy allocates what a .npy header claims before reading a byte: a corrupt header of 713 TiB was a
    MemoryError traceback (and a smaller absurd one would take the machine's memory). Each header is now
    checked against its zip member's size first, naming the file and array."""
    _npz_with_header(tmp_path / "mnist.npz", (784 * 10**9, 1000))
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: pytest.fail("an array was read"))
    with pytest.raises(DataError, match=r"mnist.npz: array 'x_train.npy': its header says shape \(784000000000, "
                                        r"1000\) of uint8 = 784,000,000,000,000 bytes, but the member holds 16"):
        load_pooled("mnist", str(tmp_path))


def test_an_npz_whose_zip_claims_more_than_it_can_hold_is_refused(tmp_path):
    """A member whose zip entry and header agree on a size the stored bytes cannot be (a lying zip):
    stored members hold exactly their size, deflated ones at most ~1032 times their compressed bytes."""
    import zipfile

    from zofl.tasks.data import read_npz

    _npz_with_header(tmp_path / "a.npz", (10,), data=b"\0" * 10)
    raw = bytearray((tmp_path / "a.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "a.npz") as z:
        info = z.infolist()[0]
    # the central directory's uncompressed size of the first member, set to 2**31
    cd = raw.index(b"PK\x01\x02")
    raw[cd + 24:cd + 28] = (2**31).to_bytes(4, "little")
    (tmp_path / "a.npz").write_bytes(bytes(raw))
    with pytest.raises(DataError, match=rf"a.npz: array '{info.filename}': the zip says 2,147,483,648 bytes stored in"):
        read_npz(tmp_path / "a.npz", ("x_train", "y_train", "x_test", "y_test"))


@pytest.mark.parametrize("content, message", [
    (b"", "is empty, not a .npz file"),
    (b"\x93NUMPY\x01\x00rest", "is a single .npy array, not a .npz file (a zip of named arrays: np.savez)"),
    (b"\x80\x04\x95 pickled", "is a Python pickle, not a .npz file (a zip of named arrays: np.savez)"),
    (b"\x1f\x8b\x08\x00 gz", "is gzip-compressed, not a .npz file (unpack it first)"),
    (bytes(range(256)), "is not a .npz file (a zip archive of .npy arrays); it starts with "
                        "b'\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\t\\n\\x0b\\x0c\\r\\x0e\\x0f'"),
])
def test_a_file_that_is_no_npz_is_called_what_it_is(tmp_path, content, message):
    """np.load calls any file that is not a zip 'pickled data' (allow_pickle=False): a text or binary file
    was reported as holding pickled Python objects. The message is the file's path and what it is, nothing more."""
    (tmp_path / "mnist.npz").write_bytes(content)
    _load_pooled.cache_clear()
    with pytest.raises(DataError) as e:
        load_pooled("mnist", str(tmp_path))
    assert str(e.value) == f"{tmp_path / 'mnist.npz'}: {message}"


def test_data_file_errors_are_data_file_errors(tmp_path):
    """Errors about a file are DataFileError (they start with the path): a caller can name the file
    instead of keys such as num-clients and alpha, which have nothing to do with it."""
    from zofl.tasks.data import DataFileError, check_file

    d = _keras(tmp_path, y_train=np.arange(40) % 10 + 10)
    with pytest.raises(DataFileError, match=r"^" + str(tmp_path / "mnist.npz")):
        check_file("mnist", d, False)
    _keras(tmp_path)
    check_file("mnist", d, False)
    check_file("digits", "", False)


def test_an_npz_that_is_no_regular_file_is_refused_without_waiting(tmp_path):
    """Issue 47: the .npz reader opened its file blocking, so a FIFO (here given to read_npz directly; the callers'
    is_file checks leave a race) waited for a writer for ever. It is a DataFileError naming the file, at once."""
    import os
    import threading

    from zofl.tasks.data import DataFileError, read_npz

    os.mkfifo(tmp_path / "mnist.npz")
    result = []

    def read():
        try:
            read_npz(tmp_path / "mnist.npz", ("x_train",))
        except Exception as exc:  # noqa: BLE001  (the test looks at what it was)
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)  # a reader that waits for ever is left behind, not joined
    reader.start()
    reader.join(30)
    assert result and isinstance(result[0], DataFileError), "read_npz waited for a writer of the FIFO"
    assert str(result[0]) == (f"{tmp_path / 'mnist.npz'}: is a FIFO (named pipe), not a regular file; a .npz data "
                              f"file is read only from a regular file")


def test_a_covtype_file_is_read_scaled_and_fingerprinted_as_stored(tmp_path):
    """covtype.npz as a user converted it: labels already 0..6 stay as they are (1..7 are shifted); a constant
    column stays 0 (no division by its zero span); x float32, y int64; the fingerprint is of the arrays as stored;
    the source is the file."""
    from zofl.tasks.data import array_fingerprint, load_pooled

    x = np.array([[2.0, 5.0, 1.0], [4.0, 5.0, 3.0], [3.0, 5.0, 2.0]] * 3, dtype=np.float32)
    y = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1], dtype=np.int64)
    np.savez(tmp_path / "covtype.npz", x=x, y=y)
    p = load_pooled("covtype", str(tmp_path), False)
    assert p.x.dtype == np.float32 and p.y.dtype == np.int64 and p.y.tolist() == y.tolist()
    np.testing.assert_array_equal(p.x[:3], [[0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.5, 0.0, 0.5]])
    assert p.fingerprint == array_fingerprint(x, y) and p.source == str((tmp_path / "covtype.npz").resolve())


def test_a_keras_style_npz_is_checked_then_copied_into_a_new_folder_and_a_bad_one_refused_naming_its_part(tmp_path):
    """``convert_original`` from a Keras-style .npz (MNIST's four arrays; Covertype's x, y with cover types
    1..7): written as <data_dir>/<name>.npz, the folders made; a file whose labels or features are unusable refused
    naming the file and the part (train or test), a source that is not there named."""
    from zofl.tasks.data import DataFileError, convert_original

    rng = np.random.default_rng(0)
    good = {"x_train": rng.integers(0, 256, (12, 28, 28), dtype=np.uint8), "y_train": np.arange(12) % 10,
            "x_test": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), "y_test": np.arange(5)}
    src = tmp_path / "keras.npz"
    np.savez(src, **good)
    out = convert_original("mnist", src, tmp_path / "a" / "b")
    assert out == tmp_path / "a" / "b" / "mnist.npz"
    with np.load(out) as f:
        assert sorted(f.files) == sorted(good) and all(np.array_equal(f[k], v) for k, v in good.items())
    for part, change in (("train", {"y_train": np.full(12, 10)}), ("test", {"y_test": np.full(5, -1)}),
                         ("train", {"x_train": np.full((12, 2), "a")}), ("test", {"x_test": np.zeros((4, 28, 28))})):
        np.savez(src, **{**good, **change})
        with pytest.raises(DataFileError, match=f"^{re.escape(str(src))}: .*'{part}'"):
            convert_original("mnist", src, tmp_path / "c")
    cov = {"x": rng.integers(0, 50, (14, 54)).astype(np.float32), "y": np.arange(14) % 7 + 1}
    np.savez(src, **cov)
    with np.load(convert_original("covtype", src, tmp_path / "d")) as f:
        assert sorted(f.files) == ["x", "y"] and np.array_equal(f["y"], cov["y"]) and np.array_equal(f["x"], cov["x"])
    np.savez(src, x=cov["x"], y=cov["y"] + 7)  # cover types 8..14
    with pytest.raises(DataFileError, match=f"^{re.escape(str(src))}: labels of 'train' must lie in"):
        convert_original("covtype", src, tmp_path / "e")
    with pytest.raises(DataFileError, match=f"^{re.escape(str(tmp_path / 'none'))}: no such file or folder$"):
        convert_original("mnist", tmp_path / "none", tmp_path / "f")


def test_a_data_error_s_reason_is_one_line_of_at_most_200_characters():
    from zofl.tasks.data import _one_line

    assert _one_line(ValueError("a\n   b\tc")) == "a b c"
    assert _one_line(ValueError("x" * 200)) == "x" * 200
    assert _one_line(ValueError("x" * 201)) == "x" * 200 + "..."
    assert _one_line(ValueError("y" * 30), limit=10) == "y" * 10 + "..."
    assert _one_line(KeyError("a\n b"), typed=True) == "KeyError: 'a\\n b'"  # sources' messages name the type
    assert _one_line(OSError("z " * 150), typed=True) == ("OSError: " + "z " * 150)[:200] + "..."


def _idx_bytes(magic: bytes, dims, body: bytes) -> bytes:
    return magic + b"".join(int(d).to_bytes(4, "big") for d in dims) + body


def test_an_idx_file_is_read_by_its_header_exactly_and_any_other_file_is_refused_naming_why(tmp_path):
    """MNIST's IDX format (zofl.tasks.data._read_idx): magic 00 00 08 <ndim>, ndim big-endian 4-byte sizes, then
    the unsigned bytes. Read exactly (three axes of different lengths, so a misread size or order shows); every other
    magic (a float or int IDX file: type byte 0x0D or 0x0C) refused; a header or body shorter than it says named."""
    from zofl.tasks.data import DataFileError, _read_idx

    path = tmp_path / "f-idx3-ubyte"

    def read(raw: bytes):
        path.write_bytes(raw)
        return _read_idx(path)

    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4) * 7
    got = read(_idx_bytes(b"\x00\x00\x08\x03", arr.shape, arr.tobytes()))
    assert got.dtype == np.uint8 and got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, arr)
    assert read(_idx_bytes(b"\x00\x00\x08\x01", [0], b"")).shape == (0,)  # a header and no data: 8 bytes, no more
    for magic in (b"\x01\x00\x08\x01", b"\x00\x01\x08\x01", b"\x00\x00\x0d\x01", b"\x00\x00\x0c\x01", b"\x00\x00\x08"):
        with pytest.raises(DataFileError, match=f"^{re.escape(str(path))}: not an IDX file of unsigned bytes$"):
            read(_idx_bytes(magic, [1] if len(magic) == 4 else [], b"\x05" if len(magic) == 4 else b""))
    with pytest.raises(DataFileError, match=r": holds 0 bytes of data, its header says \(\) \(truncated\?\)$"):
        read(b"\x00\x00\x08\x00")  # a 4-byte header of no axes: its one (empty-product) value is missing
    with pytest.raises(DataFileError, match=r": its header says 3 dimensions but the file ends first \(truncated\?\)$"):
        read(b"\x00\x00\x08\x03" + bytes(11))
    with pytest.raises(DataFileError, match=r": holds 1 bytes of data, its header says \(16777217,\) \(truncated\?\)$"):
        read(_idx_bytes(b"\x00\x00\x08\x01", [2**24 + 1], b"\x05"))  # every byte of a size counts, big-endian
    with pytest.raises(DataFileError, match=r": holds 1 bytes of data, its header says \(1, 1, 65537\) \(trunc"):
        read(_idx_bytes(b"\x00\x00\x08\x03", [1, 1, 2**16 + 1], b"\x05"))  # each size is its own 4 bytes
    with pytest.raises(DataFileError, match=r": holds 23 bytes of data, its header says \(2, 3, 4\) \(truncated\?\)$"):
        read(_idx_bytes(b"\x00\x00\x08\x03", arr.shape, arr.tobytes()[:-1]))


def _cifar_pickle(batch: dict, module: str = "numpy._core.multiarray") -> bytes:
    """``batch`` pickled as CIFAR-10's files are (protocol 2, bytes keys), naming ``module`` for numpy's
    _reconstruct (the original files, pickled by numpy 1, name numpy.core.multiarray)."""
    import pickle

    raw = pickle.dumps(batch, protocol=2)
    for old in (b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n"):
        raw = raw.replace(old, b"c" + module.encode() + b"\n")
    return raw


def test_a_cifar_batch_is_unpickled_into_images_and_labels_and_a_pickle_naming_anything_else_is_refused(tmp_path):
    """zofl.tasks.data._cifar_batch: each row of b"data" is 3 planes of 32 x 32 (red, green, blue), read into
    (n, 32, 32, 3) uint8 images; b"labels" into uint8; pickles from numpy 1 and 2 both read; a pickle that names any
    other callable (os.system) is refused before anything runs, and a pickle of anything but a dict is named."""
    import os
    import pickle

    from zofl.tasks.data import _cifar_batch

    rng = np.random.default_rng(4)
    data = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
    path = tmp_path / "data_batch_1"
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        path.write_bytes(_cifar_pickle({b"data": data, b"labels": [9, 0, 4]}, module))
        x, y = _cifar_batch(path)
        assert x.shape == (3, 32, 32, 3) and x.dtype == np.uint8 and y.dtype == np.uint8 and y.tolist() == [9, 0, 4]
        for i, r, c, ch in ((0, 0, 0, 0), (1, 5, 17, 1), (2, 31, 30, 2), (2, 3, 31, 0)):
            assert x[i, r, c, ch] == data[i, ch * 1024 + r * 32 + c]

    # the original files were pickled by Python 2: their keys are byte strings (SHORT_BINSTRING), read as bytes
    def py2_str(s: bytes) -> bytes:
        return b"U" + bytes([len(s)]) + s

    def py2_ints(v) -> bytes:
        return b"](" + b"".join(b"K" + bytes([int(i)]) for i in v) + b"e"

    path.write_bytes(b"\x80\x02}q\x00(" + py2_str(b"data") + b"](" + b"".join(py2_ints(r) for r in data) + b"e"
                     + py2_str(b"labels") + py2_ints([1, 2, 3]) + b"u.")
    x, y = _cifar_batch(path)
    assert y.tolist() == [1, 2, 3] and x.dtype == np.uint8 and x[1, 5, 17, 1] == data[1, 1024 + 5 * 32 + 17]

    class Boom:
        def __reduce__(self):
            return (os.system, ("true",))

    path.write_bytes(pickle.dumps({b"data": Boom(), b"labels": []}, protocol=2))
    with pytest.raises(pickle.UnpicklingError, match=r"^posix\.system is not part of a CIFAR-10 batch$"):
        _cifar_batch(path)
    path.write_bytes(pickle.dumps([b"data", b"labels"], protocol=2))
    with pytest.raises(ValueError, match=r"^a pickled list, not a CIFAR-10 batch's dict$"):
        _cifar_batch(path)


def test_a_covtype_column_of_span_below_1_is_scaled_to_0_1_and_labels_stored_as_a_column_are_flattened(tmp_path):
    """covtype.npz's features are scaled by each column's min and max whatever the span (here 0.5 and 20), and its
    labels, stored as one column of cover types 1..7, become the flat 0..6 every split indexes."""
    x = np.array([[0.25, 10.0], [0.75, 30.0], [0.5, 20.0]] * 3, dtype=np.float32)
    y = (np.arange(9) % 7 + 1).reshape(9, 1)
    np.savez(tmp_path / "covtype.npz", x=x, y=y)
    p = load_pooled("covtype", str(tmp_path))
    np.testing.assert_array_equal(p.x[:3], [[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]])
    assert p.y.shape == (9,) and p.y.tolist() == (np.arange(9) % 7).tolist()


def _parts_of(*sizes):
    """Partitions of consecutive positions 0, 1, ... of the given sizes."""
    edges = np.cumsum((0, *sizes))
    return [np.arange(a, b) for a, b in zip(edges[:-1], edges[1:])]


def test_top_up_takes_what_the_small_partitions_lack_from_the_largest_down_to_one_level_and_loses_no_example():
    """top_up: every partition above the highest level L that frees enough gives its last positions down to L, the
    last donors stopping at L + 1 where L frees more than needed; each example stays in exactly one partition."""
    from zofl.tasks.data import top_up

    out, moved = top_up(_parts_of(4, 1, 4), 2, 0)  # level 3 frees 2, 1 needed: the second donor stops at 4
    assert moved == 1 and [p.tolist() for p in out] == [[0, 1, 2], [4, 3], [5, 6, 7, 8]]
    out, moved = top_up(_parts_of(12, 0, 9, 12), 5, 0)  # level 9 frees 6, 5 needed: the last donor stops at 10
    assert moved == 5 and [len(p) for p in out] == [9, 5, 9, 10]
    assert out[0].tolist() == list(range(9)) and out[3].tolist() == list(range(21, 31))
    assert sorted(out[1].tolist()) == [9, 10, 11, 31, 32]
    np.testing.assert_array_equal(np.sort(np.concatenate(out)), np.arange(33))


def test_the_data_caches_hold_a_bounded_number_of_datasets_and_release_data_empties_them():
    """A process keeps at most 4 pooled datasets (the oldest dropped), and release_data drops them all: zofl run's
    checking process holds nothing for the run's length."""
    from zofl.tasks.data import release_data

    release_data()
    for folder in ("a", "b", "c", "d", "e", "f"):  # digits ignores the folder: six keys, one dataset each
        _load_pooled("digits", folder, False, ())
    assert _load_pooled.cache_info().currsize == 4
    release_data()
    assert _load_pooled.cache_info().currsize == 0


def test_a_gzipped_original_is_unpacked_up_to_its_cap_and_no_further_and_a_bad_one_is_named(tmp_path, monkeypatch):
    """_read_source: a .gz original unpacking to exactly the cap is read; one byte more is refused, without reading
    what follows (here its trailer is cut off: a gzip bomb stops at the cap); a file that is no gzip is named."""
    import gzip

    from zofl.tasks import data
    from zofl.tasks.data import DataFileError

    monkeypatch.setattr(data, "SOURCE_CAP", 1000)
    body = b"".join(b"%d,%d\n" % (i, i * i) for i in range(200))[:1001]
    path = tmp_path / "covtype.data.gz"
    path.write_bytes(gzip.compress(body[:1000]))
    assert data._read_source(path) == body[:1000]
    path.write_bytes(gzip.compress(body)[:-8])  # no CRC and size at its end: reading to the end would fail
    with pytest.raises(DataFileError) as e:
        data._read_source(path)
    assert str(e.value) == (f"{path}: unpacks to more than 1,000 bytes, more than any original data file (the "
                            f"largest, covtype.data, is 75 MB)")
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataFileError) as e:
        data._read_source(path)
    assert str(e.value) == f"{path}: not a readable gzip file (BadGzipFile: Not a gzipped file (b'no'))"


def test_an_original_file_that_is_no_regular_file_is_refused_naming_it_as_a_datasets_original_file(tmp_path):
    import os

    from zofl.tasks.data import DataFileError, convert_original

    os.mkfifo(tmp_path / "covtype.data")
    with pytest.raises(DataFileError, match=rf"^{re.escape(str(tmp_path / 'covtype.data'))}: is a FIFO \(named pipe\), "
                                            r"not a regular file; a dataset's original file is read only from a "
                                            r"regular file$"):
        convert_original("covtype", tmp_path / "covtype.data", tmp_path / "out")


def test_mnist_idx_files_in_a_folder_are_converted_and_bad_labels_refused_naming_the_folder_and_the_part(tmp_path):
    from zofl.tasks.data import DataFileError, convert_original

    rng = np.random.default_rng(1)
    arrays = {"x_train": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8), "y_train": np.array([0, 1, 2, 3], np.uint8),
              "x_test": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8), "y_test": np.array([9, 8], np.uint8)}
    stems = {"x_train": "train-images-idx3-ubyte", "y_train": "train-labels-idx1-ubyte",
             "x_test": "t10k-images-idx3-ubyte", "y_test": "t10k-labels-idx1-ubyte"}
    src = tmp_path / "raw"
    src.mkdir()

    def write(**change):
        for key, a in {**arrays, **change}.items():
            (src / stems[key]).write_bytes(_idx_bytes(b"\x00\x00\x08" + bytes([a.ndim]), a.shape, a.tobytes()))

    write()
    with np.load(convert_original("mnist", src, tmp_path / "out")) as f:
        assert sorted(f.files) == sorted(arrays) and all(np.array_equal(f[k], v) for k, v in arrays.items())
    for part, change in (("train", {"y_train": np.array([0, 1, 2, 12], np.uint8)}),
                         ("test", {"y_test": np.array([10, 0], np.uint8)})):
        write(**change)
        with pytest.raises(DataFileError, match=rf"^{re.escape(str(src))}: labels of '{part}' must lie in \[0, 10\)"):
            convert_original("mnist", src, tmp_path / "bad")


def test_cifar10_batches_in_a_folder_are_converted_and_bad_labels_refused_naming_the_folder_and_the_part(tmp_path):
    from zofl.tasks.data import DataFileError, convert_original

    data = np.random.default_rng(2).integers(0, 256, (12, 3072), dtype=np.uint8)
    src = tmp_path / "cifar-10-batches-py"
    src.mkdir()

    def write(train_label=0, test_label=7):
        for i in range(1, 6):
            (src / f"data_batch_{i}").write_bytes(_cifar_pickle({b"data": data[2 * i - 2:2 * i],
                                                                 b"labels": [i, train_label]}))
        (src / "test_batch").write_bytes(_cifar_pickle({b"data": data[10:], b"labels": [3, test_label]}))

    write()
    with np.load(convert_original("cifar10", src, tmp_path / "out")) as f:
        assert f["x_train"].shape == (10, 32, 32, 3) and f["x_test"].shape == (2, 32, 32, 3)
        assert f["y_train"].tolist() == [1, 0, 2, 0, 3, 0, 4, 0, 5, 0] and f["y_test"].tolist() == [3, 7]
        assert f["x_test"][1, 0, 0, 2] == data[11, 2048]
    for part, labels in (("train", {"train_label": 11}), ("test", {"test_label": 10})):
        write(**labels)
        with pytest.raises(DataFileError, match=rf"^{re.escape(str(src))}: labels of '{part}' must lie in \[0, 10\)"):
            convert_original("cifar10", src, tmp_path / "bad")


def test_covtype_data_in_a_folder_plain_or_gzipped_is_converted_and_a_table_of_other_width_refused(tmp_path):
    """Covertype's covtype.data(.gz) found in a --from folder: written as float32 features (54 columns) and the cover
    types as stored; a table of 56 columns refused naming the file; a dataset without originals named."""
    import gzip

    from zofl.tasks.data import DataFileError, convert_original

    rows = np.hstack([np.random.default_rng(3).integers(0, 4000, (8, 54)), (np.arange(8) % 7 + 1)[:, None]])
    text = "".join(",".join(map(str, r)) + "\n" for r in rows).encode()
    for name, content in (("covtype.data", text), ("covtype.data.gz", gzip.compress(text))):
        src = tmp_path / name.replace(".", "-")
        src.mkdir()
        (src / name).write_bytes(content)
        with np.load(convert_original("covtype", src, tmp_path / "out" / src.name)) as f:
            assert f["x"].dtype == np.float32 and f["x"].shape == (8, 54)
            np.testing.assert_array_equal(f["x"], rows[:, :54])
            np.testing.assert_array_equal(f["y"], rows[:, 54])
    wide = tmp_path / "wide.data"
    wide.write_text("".join(",".join(map(str, r)) + ",1\n" for r in rows))
    with pytest.raises(DataFileError) as e:
        convert_original("covtype", wide, tmp_path / "w")
    assert str(e.value) == f"{wide}: expected 55 comma-separated columns (54 features and the cover type)"
    with pytest.raises(DataError) as e:
        convert_original("digits", tmp_path / "covtype-data", tmp_path / "x")
    assert str(e.value) == "dataset 'digits' has no original files to convert"


def test_a_missing_covtype_file_names_scikit_learn_s_download_and_uci_s_original(tmp_path):
    with pytest.raises(DataError) as e:
        check_available("covtype", str(tmp_path), download=False)
    assert str(e.value).startswith(f"dataset 'covtype': file {tmp_path / 'covtype.npz'} not found. With a network: ")
    assert "scikit-learn's fetch_covtype" in str(e.value) and "from UCI's covtype.data(.gz)" in str(e.value)


def test_cifar10_is_downloaded_into_a_new_folder_s_torchvision_subfolder_as_uint8_arrays(tmp_path, monkeypatch):
    """torchvision's CIFAR10 (replaced: no network here) gives its targets as a list of ints: stored as uint8, as
    MNIST's, in <data-dir>/cifar10.npz, the data-dir made with its parents, torchvision's files below it."""
    from zofl.tasks import data

    calls = []

    class FakeCIFAR10:
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            n = 6 if train else 2
            self.data = np.full((n, 32, 32, 3), 200, np.uint8)
            self.targets = [i % 10 for i in range(n)]

    _stand_in_torchvision(monkeypatch, CIFAR10=FakeCIFAR10)
    deep = tmp_path / "a" / "b"
    out = data.download_npz("cifar10", deep)
    root = str(deep / "torchvision")
    assert out == deep / "cifar10.npz" and calls == [(root, True, True), (root, False, True)]
    with np.load(out) as f:
        assert f["x_train"].shape == (6, 32, 32, 3) and f["y_train"].dtype == np.uint8 and f["y_test"].dtype == np.uint8
        assert f["y_train"].tolist() == [0, 1, 2, 3, 4, 5]


def test_a_failed_download_s_reason_is_cut_at_200_characters(tmp_path, monkeypatch):
    from zofl.tasks import data

    class Offline:
        def __init__(self, root, train, download):
            raise OSError("x" * 300)

    _stand_in_torchvision(monkeypatch, MNIST=Offline)
    with pytest.raises(DataError) as e:
        data.download_npz("mnist", tmp_path)
    assert str(e.value).startswith(f"dataset 'mnist': torchvision's download failed (OSError: {'x' * 200}); ")


def test_a_minimum_beyond_int64_is_a_split_error_not_an_overflow():
    """top_up compares the partitions' total with m x min_size in Python integers before numpy sees min_size."""
    from zofl.tasks.data import SplitError, top_up

    with pytest.raises(SplitError, match=r"^9 examples cannot give 3 clients 9223372036854775808 each$"):
        top_up(_parts_of(4, 1, 4), 2**63, 0)


def test_make_splits_defaults_read_the_working_folder_never_download_and_top_up(monkeypatch, caplog, fake_npz_dir):
    """make_splits' defaults (a caller of its own, e.g. a user's script): data_dir "", download False, at least 10
    examples per client, the top-up fallback, the file's stamp in the cache key; a draw that cannot give every
    client that many is topped up with a warning on the "zofl" logger that says so."""
    import logging

    import zofl.tasks.data as data

    seen = []
    real = data._make_splits
    monkeypatch.setattr(data, "_make_splits", lambda *args: seen.append(args[5:]) or real(*args))
    make_splits("digits", 5, 0.7, 0.2, 987654)
    assert seen == [("", False, 10, data.file_stamp("digits", ""), "top-up")]
    make_splits("mnist", 3, 1.0, 0.0, 5, data_dir=str(fake_npz_dir))  # a file's stamp: replaced, it is read again
    assert seen[-1][3] == data.file_stamp("mnist", str(fake_npz_dir)) != ()
    with caplog.at_level(logging.WARNING, logger="zofl"):
        split = make_splits("digits", 150, 0.05, 0.0, 3)  # 1,617 client rows: 10 each cannot come from the draw
    assert min(len(c) for c in split.clients) >= 10
    [warning] = [r for r in caplog.records if r.name == "zofl"]
    assert warning.getMessage().startswith("the Dirichlet draw (alpha=0.05) could not give each of 150 clients "
                                           "min-partition-size=10 examples in 10 tries: "), warning.getMessage()
