"""Local data (issue 48): every format read correctly, every refusal pinned to its one-line message, every
partitioner's output a deterministic partition (dirichlet bit for bit zofl.tasks.data's), and the benchmark at its
smallest setting. Tiny files in tmp_path; nothing starts Flower."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from zofl.tasks import sources
from zofl.tasks.data import DataError, DataFileError, SplitError, array_fingerprint, dirichlet_partition
from zofl.tasks.sources import PartitionParams, partition, read_local, split_test

ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(48)
X = RNG.normal(size=(30, 3))
Y = np.arange(30) % 3
IDS = np.arange(30) % 5


def _table(**extra) -> pa.Table:
    return pa.table({"f0": X[:, 0], "name": [f"row{i}" for i in range(30)], "f1": X[:, 1], "f2": X[:, 2],
                     "label": Y, "writer": IDS, **extra})


def _refused(match: str, *args, **kwargs):
    with pytest.raises(DataFileError, match=match) as info:
        read_local(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


# -- each format -------------------------------------------------------------------------------------------------

def test_npz_with_x_and_y_keys(tmp_path):
    np.savez(tmp_path / "a.npz", x=X, y=Y)
    d = read_local(tmp_path / "a.npz", num_classes=3, num_features=3)
    assert d.x.dtype == np.float32 and d.x.flags.c_contiguous and d.y.dtype == np.int64
    np.testing.assert_array_equal(d.x, X.astype(np.float32))
    np.testing.assert_array_equal(d.y, Y)
    assert d.x_test is None and d.y_test is None and d.ids is None and d.num_classes == 3
    assert d.fingerprint == array_fingerprint(X, Y) and str(tmp_path / "a.npz") in d.source
    np.savez(tmp_path / "b.npz", feats=X, labels=Y)
    assert read_local(tmp_path / "b.npz", x_key="feats", y_key="labels").fingerprint == d.fingerprint
    with pytest.raises(ValueError):
        d.x[0, 0] = 1.0  # read-only


def test_npz_keras_layout_returns_train_and_test(tmp_path):
    xtr, xte = RNG.integers(0, 255, (20, 4, 4), dtype=np.uint8), RNG.integers(0, 255, (6, 4, 4), dtype=np.uint8)
    ytr, yte = (np.arange(20) % 10).astype(np.uint8), (np.arange(6) % 10).astype(np.uint8)
    np.savez(tmp_path / "k.npz", x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    d = read_local(tmp_path / "k.npz", num_classes=10, num_features=16)
    assert d.x.shape == (20, 16) and d.x_test.shape == (6, 16) and d.y_test.dtype == np.int64
    np.testing.assert_array_equal(d.x, xtr.reshape(20, 16).astype(np.float32))  # values as stored: no scaling
    np.testing.assert_array_equal(d.y_test, yte)
    assert d.fingerprint == array_fingerprint(xtr, ytr, xte, yte)


def test_parquet_default_and_named_columns(tmp_path):
    emb = pa.array(X[:, :2].tolist(), pa.list_(pa.float64()))
    pq.write_table(_table(emb=emb), tmp_path / "t.parquet")
    d = read_local(tmp_path / "t.parquet", id_column="writer")
    # every numeric column but label and id, in table order; the string column skipped, the list flattened
    np.testing.assert_allclose(d.x, np.hstack([X, X[:, :2]]).astype(np.float32))
    np.testing.assert_array_equal(d.y, Y)
    np.testing.assert_array_equal(d.ids, IDS)
    d = read_local(tmp_path / "t.parquet", feature_columns="f2, f0", label_column="label")
    np.testing.assert_array_equal(d.x, X[:, [2, 0]].astype(np.float32))
    assert d.ids is None
    d = read_local(tmp_path / "t.parquet", id_column="name", feature_columns="f0")  # strings: read through a dictionary
    assert d.ids.dtype.kind == "U" and list(d.ids[:2]) == ["row0", "row1"]


def test_csv_with_string_ids(tmp_path):
    pacsv.write_csv(_table().set_column(5, "writer", pa.array([f"w{i}" for i in IDS])), tmp_path / "t.csv")
    d = read_local(tmp_path / "t.csv", id_column="writer", num_classes=3)
    np.testing.assert_allclose(d.x, X.astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(d.y, Y)
    assert d.ids.dtype.kind == "U" and list(d.ids[:6]) == ["w0", "w1", "w2", "w3", "w4", "w0"]
    d2 = read_local(tmp_path / "t.csv", feature_columns=["f1"], id_column="writer")
    np.testing.assert_allclose(d2.x[:, 0], X[:, 1], rtol=1e-6)


def _save_hf(folder: Path, n: int = 12, dict_: bool = True) -> tuple[np.ndarray, np.ndarray]:
    from datasets import Array2D, Dataset, DatasetDict, Features, Value

    img = RNG.integers(0, 255, (n, 3, 2), dtype=np.uint8)
    lab = np.arange(n) % 4
    ds = Dataset.from_dict({"img": img, "vec": img[:, 0, :].astype(np.float32).tolist(), "label": lab,
                            "note": ["x"] * n},
                           features=Features({"img": Array2D((3, 2), "uint8"), "vec": [Value("float32")],
                                              "label": Value("int64"), "note": Value("string")}))
    (DatasetDict({"train": ds, "test": ds.select(range(4))}) if dict_ else ds).save_to_disk(str(folder))
    return img, lab


def test_save_to_disk_folder_found_below_and_flattened(tmp_path):
    img, lab = _save_hf(tmp_path / "deep" / "hf")
    d = read_local(tmp_path, feature_columns="img", num_features=6)  # found two folders below the one named
    np.testing.assert_array_equal(d.x, img.reshape(12, 6).astype(np.float32))
    np.testing.assert_array_equal(d.y, lab)
    np.testing.assert_array_equal(d.x_test, img[:4].reshape(4, 6).astype(np.float32))
    assert "datasets folder" in d.source
    d = read_local(tmp_path / "deep" / "hf")  # default: img and vec, the string column skipped
    assert d.x.shape == (12, 8)
    _save_hf(tmp_path / "plain", dict_=False)
    assert read_local(tmp_path / "plain").x_test is None


def test_module_function_loader(tmp_path, monkeypatch):
    (tmp_path / "my_loader48.py").write_text(textwrap.dedent("""
        import numpy as np
        def two():
            return np.ones((5, 2, 2)), np.array([0, 1, 0, 1, 1])
        def four():
            return np.ones((5, 3)), np.arange(5) % 2, np.zeros((2, 3)), np.array([1, 0])
        def garbage():
            return "hello"
        def short():
            return (np.ones((5, 3)),)
        def listy():
            return np.ones((2, 3)), [0, 1]
        def boom():
            raise RuntimeError("the database is down")
        def big():
            return np.ones((100, 3)), np.zeros(100, dtype=np.int64)
        not_callable = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    d = read_local("my_loader48:two")
    assert d.x.shape == (5, 4) and d.x_test is None and d.source == "loader my_loader48:two"
    d = read_local("my_loader48:four", num_classes=2)
    assert d.x_test.shape == (2, 3) and list(d.y_test) == [1, 0]
    tuple_ = "expected a tuple \\(x, y\\) or \\(x, y, x_test, y_test\\) of numpy arrays"
    _refused(f"^loader 'my_loader48:garbage': returned a str; {tuple_}$", "my_loader48:garbage")
    _refused(f"returned a tuple of 1; {tuple_}", "my_loader48:short")
    _refused("returned a list as item 1", "my_loader48:listy")
    _refused("^loader 'my_loader48:boom': raised RuntimeError: the database is down$", "my_loader48:boom")
    _refused("is a int, not a function", "my_loader48:not_callable")
    _refused("has no attribute 'nope'", "my_loader48:nope")
    _refused("^loader 'no_such_module48:f': cannot import module 'no_such_module48' \\(ModuleNotFoundError: No "
             "module named 'no_such_module48'\\)$", "no_such_module48:f")
    _refused("returned 3,200 bytes of arrays, more than the cap of 1,000 bytes", "my_loader48:big", cap=1000)
    assert read_local("my_loader48:big", cap=3200).x.shape == (100, 3)  # exactly at the cap: taken


def test_split_test_is_deterministic_and_disjoint(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.arange(60.0).reshape(20, 3), y=np.arange(20) % 2, ids=np.arange(20) % 4)
    d = read_local(tmp_path / "a.npz", id_column="ids")
    a, b, c = split_test(d, 0.25, 1), split_test(d, 0.25, 1), split_test(d, 0.25, 2)
    assert len(a.y) == 15 and len(a.y_test) == 5 and len(a.ids) == 15
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert not np.array_equal(a.x_test, c.x_test)
    rows = np.concatenate([a.x[:, 0], a.x_test[:, 0]]) / 3
    assert sorted(rows.astype(int).tolist()) == list(range(20))  # every example once
    np.testing.assert_array_equal(a.ids, (a.x[:, 0] / 3).astype(int) % 4)  # the ids follow their rows
    assert split_test(a, 0.5, 0) is a  # a test part already there: kept
    with pytest.raises(DataError, match="test_fraction must lie in \\(0, 1\\), got 1.0"):
        split_test(d, 1.0)
    with pytest.raises(DataFileError, match="20 examples cannot be split by test_fraction=0.01 \\(0 test examples\\)"):
        split_test(d, 0.01)


# -- refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["d.npz", "d.parquet", "d.csv"])
def test_fifo_is_refused_at_once(tmp_path, name):
    """Opened without O_NONBLOCK, a FIFO with no writer blocks the read for ever: an alarm ends the test instead."""
    os.mkfifo(tmp_path / name)

    def hung(*_):
        raise TimeoutError(f"read_local blocked on the FIFO {name}")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        _refused(f"^{tmp_path / name}: is a FIFO \\(named pipe\\), not a regular file; a local data file is read "
                 f"only from a regular file$", tmp_path / name)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_file_over_the_cap_is_refused(tmp_path, monkeypatch):
    np.savez(tmp_path / "a.npz", x=X, y=Y)
    pq.write_table(_table(), tmp_path / "a.parquet")
    pacsv.write_csv(_table(), tmp_path / "a.csv")
    _save_hf(tmp_path / "hf", dict_=False)
    monkeypatch.setattr(sources, "LOCAL_DATA_CAP", 100)
    for name in ("a.npz", "a.parquet", "a.csv"):
        size = (tmp_path / name).stat().st_size
        _refused(f"^{tmp_path / name}: {size:,} bytes, more than the 100 bytes \\(100 bytes\\) a local data file may "
                 f"be$", tmp_path / name)
    _refused(f"^{tmp_path / 'hf'}: its data files hold [0-9,]+ bytes, more than the cap of 100 bytes",
             tmp_path / "hf")


def test_parquet_that_unpacks_past_the_cap_is_refused(tmp_path):
    pq.write_table(pa.table({"f": np.zeros(50_000), "label": np.zeros(50_000, dtype=np.int64)}),
                   tmp_path / "z.parquet", compression="zstd")
    assert (tmp_path / "z.parquet").stat().st_size < 10_000  # 800,000 bytes of numbers, run-length encoded
    _refused(f"^{tmp_path / 'z.parquet'}: its columns take [0-9,]+ bytes decoded \\(Parquet metadata\\), more than "
             f"the cap of 600,000 bytes for local data$", tmp_path / "z.parquet", cap=600_000)
    assert read_local(tmp_path / "z.parquet", cap=1_000_000).x.shape == (50_000, 1)


def test_wrong_width_nan_labels_empty(tmp_path):
    def npz(name, **arrays):
        np.savez(tmp_path / name, **arrays)
        return tmp_path / name

    p = str(tmp_path)
    _refused(f"^{p}/w.npz: 3 features per example, but the task declares num_features=4$",
             npz("w.npz", x=X, y=Y), num_features=4)
    _refused("6 features per example \\(3 x 2 flattened\\), but the task declares num_features=3",
             npz("i.npz", x=np.zeros((4, 3, 2)), y=np.zeros(4, dtype=int)), num_features=3)
    bad = X.copy()
    bad[2, 1] = np.nan
    _refused(f"^{p}/n.npz: features of 'examples' hold NaN or infinite values \\(1 examples\\)$",
             npz("n.npz", x=bad, y=Y))
    _refused(f"^{p}/r.npz: labels of 'examples' must lie in \\[0, 3\\), found 0..3$",
             npz("r.npz", x=X[:4], y=np.array([0, 1, 2, 3])), num_classes=3)
    _refused("labels of 'examples' must lie in \\[0, 2\\), found -1..1", npz("m.npz", x=X[:3], y=np.array([0, -1, 1])))
    _refused(f"^{p}/e.npz: 'examples' is empty \\(features \\(0, 3\\), labels \\(0,\\)\\); at least one example is "
             f"needed$", npz("e.npz", x=np.zeros((0, 3)), y=np.zeros(0, dtype=int)))
    _refused(f"^{p}/f.npz: labels of 'examples' must be integers, got dtype float64$", npz("f.npz", x=X, y=Y * 1.0))
    _refused("features of 'examples' must hold one row per example \\(2-D or more\\), got shape \\(30,\\)",
             npz("v.npz", x=X[:, 0], y=Y))
    _refused("features of 'examples' must be numbers, got dtype <U1", npz("s.npz", x=np.full((3, 2), "a"), y=Y[:3]))
    _refused("labels of 'examples' have shape \\(3, 3\\); they look one-hot",
             npz("h.npz", x=X[:3], y=np.eye(3, dtype=int)))
    _refused("expected exactly the arrays \\['x', 'y'\\]; missing \\['y'\\]; extra \\['labels'\\]",
             npz("k.npz", x=X, labels=Y))
    pq.write_table(_table(label=pa.array(Y * 1.0)).drop_columns(["label"]).append_column("label", pa.array(Y * 0.5)),
                   tmp_path / "f.parquet")
    _refused("labels of 'examples' must be integers, got dtype float64", tmp_path / "f.parquet")


def test_a_single_class_is_fine_for_one_party(tmp_path):
    np.savez(tmp_path / "one.npz", x=X, y=np.zeros(30, dtype=int))  # a pathological split gives a client one class
    assert read_local(tmp_path / "one.npz", num_classes=10).num_classes == 10


def test_table_refusals(tmp_path):
    t = tmp_path / "t.parquet"
    pq.write_table(_table(), t)
    _refused(f"^{t}: no label column 'y'; its columns are \\['f0', 'name', 'f1', 'f2', 'label', 'writer'\\]$", t,
             label_column="y")
    _refused("no client-id column 'who'", t, id_column="who")
    _refused("no feature column\\(s\\) \\['f9'\\]", t, feature_columns="f0,f9")
    _refused("column\\(s\\) \\['label'\\] named as features and as the label or client id", t, feature_columns="label")
    _refused("column 'name' is string, not numbers", t, feature_columns="name")
    _refused("client-id column 'f0' is double; client ids must be integers or strings", t, id_column="f0")
    pq.write_table(pa.table({"v": pa.array([[1.0, 2.0], [3.0]]), "label": [0, 1]}), tmp_path / "r.parquet")
    _refused("column 'v' holds lists of 1 to 2 values; every example needs the same number", tmp_path / "r.parquet")
    pq.write_table(pa.table({"v": pa.array([1.0, None]), "label": [0, 1]}), tmp_path / "u.parquet")
    _refused("column 'v' has 1 missing \\(null\\) values", tmp_path / "u.parquet")
    pq.write_table(pa.table({"v": [1.0, 2.0], "label": [0, 1], "w": ["a", "b" * 300]}), tmp_path / "w.parquet")
    _refused("client-id column 'w' holds an id of 300 characters; ids are at most 256", tmp_path / "w.parquet",
             id_column="w")
    pq.write_table(pa.table({"v": [1.0, 2.0], "label": ["cat", "dog"]}), tmp_path / "l.parquet")
    _refused("column 'label' is string, not numbers", tmp_path / "l.parquet")
    pq.write_table(pa.table({"s": ["a", "b"], "label": [0, 1]}), tmp_path / "s.parquet")
    _refused("no numeric feature columns besides 'label'; the others are \\{'s': 'string'\\}", tmp_path / "s.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    _refused(f"^{tmp_path / 'bad.parquet'}: cannot be read as a Parquet file \\(", tmp_path / "bad.parquet")
    (tmp_path / "e.csv").write_bytes(b"")
    _refused("cannot be read as a CSV file with a header row", tmp_path / "e.csv")


def test_path_and_folder_refusals(tmp_path):
    _refused(f"^{tmp_path / 'none.npz'}: no such file or folder", tmp_path / "none.npz")
    (tmp_path / "a.txt").write_text("1,2")
    _refused("unknown data format \\(suffix '.txt'\\)", tmp_path / "a.txt")
    _save_hf(tmp_path / "a" / "b" / "c" / "d")  # four levels below: not searched
    _refused(f"^{tmp_path}: no dataset saved by datasets' save_to_disk .* up to 3 folders below$", tmp_path)
    _save_hf(tmp_path / "x" / "one", dict_=False)
    _save_hf(tmp_path / "x" / "two", dict_=False)
    _refused("several datasets saved by save_to_disk", tmp_path / "x")
    os.symlink(tmp_path / "x" / "one", tmp_path / "link")  # a link to a folder below the one named: not followed
    (tmp_path / "top").mkdir()
    os.symlink(tmp_path / "x" / "one", tmp_path / "top" / "one")
    _refused("no dataset saved by datasets' save_to_disk", tmp_path / "top")
    state = tmp_path / "x" / "one" / "state.json"
    doc = json.loads(state.read_text())
    doc["_data_files"] = [{"filename": "/dev/zero"}]
    state.write_text(json.dumps(doc))
    _refused(f"^{state}: data file '/dev/zero' is not a plain name inside the folder$", tmp_path / "x" / "one")


def test_a_parquet_file_s_decoded_size_counts_every_value_at_its_width_from_the_metadata(tmp_path):
    """sources._decoded_bytes, the cap's estimate of what the columns asked for take decoded: per column chunk and
    row group, values x width (int64 8, float 4, a string's dictionary index 4, a fixed binary its length) plus the
    chunk's uncompressed stored bytes, plus 4 bytes of offsets per row in a list column; columns not asked for (one
    before, one after) count nothing."""
    rows = 6
    table = pa.table({"skip": pa.array(range(rows), pa.int64()),
                      "a": pa.array(range(rows), pa.int64()),
                      "s": pa.array([f"w{i}" for i in range(rows)]),
                      "emb": pa.array([[float(i), 1.0, 2.0] for i in range(rows)], pa.list_(pa.float32())),
                      "fb": pa.array([b"abc"] * rows, pa.binary(3)),
                      "late": pa.array(range(rows), pa.int64())})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=4)  # two row groups: 4 and 2 rows
    pf = pq.ParquetFile(tmp_path / "t.parquet")
    md = pf.metadata
    width = {"a": 8, "s": 4, "emb.list.element": 4, "fb": 3}
    want = 0
    for r in range(md.num_row_groups):
        rg = md.row_group(r)
        for i in range(rg.num_columns):
            cc = rg.column(i)
            if cc.path_in_schema in width:
                per_row = 3 if cc.path_in_schema.startswith("emb") else 1
                assert cc.num_values == rg.num_rows * per_row
                want += cc.num_values * width[cc.path_in_schema] + cc.total_uncompressed_size
                want += 4 * rg.num_rows if cc.path_in_schema.startswith("emb") else 0
    assert md.num_row_groups == 2 and sources._decoded_bytes(pf, {"a", "s", "emb", "fb"}) == want
    assert sources._decoded_bytes(pf, set()) == 0


def test_a_saved_dataset_s_size_is_its_listed_files_and_a_bad_listing_is_named(tmp_path):
    """sources._saved_size: the bytes of the files state.json lists (5 + 7), by stat; a state.json that is no
    object, lists no files, or lists a file that is missing or not a regular file: named, one line."""
    d = tmp_path / "saved"
    d.mkdir()
    (d / "a.arrow").write_bytes(b"x" * 5)
    (d / "b.arrow").write_bytes(b"y" * 7)
    (d / "dataset_info.json").write_text("{}")

    def state(doc):
        (d / "state.json").write_text(json.dumps(doc))

    state({"_data_files": [{"filename": "a.arrow"}, {"filename": "b.arrow"}]})
    assert sources._saved_size(d) == 12
    for doc in ([1, 2], {"_data_files": "a.arrow"}, {"_data_files": ["a.arrow"]}):
        state(doc)
        with pytest.raises(DataFileError) as info:
            sources._saved_size(d)
        assert str(info.value) == f"{d / 'state.json'}: no list of data files ('_data_files')"
    state({"_data_files": [{"filename": "a.arrow"}, {"filename": "c.arrow"}]})
    with pytest.raises(DataFileError) as info:
        sources._saved_size(d)
    assert str(info.value).startswith(f"{d / 'c.arrow'}: cannot be read (FileNotFoundError: [Errno 2] No such file")
    (d / "c.arrow").mkdir()
    with pytest.raises(DataFileError) as info:
        sources._saved_size(d)
    assert str(info.value) == f"{d / 'c.arrow'}: not a regular file; a dataset's data files must be"
    (d / "state.json").write_text("{")
    with pytest.raises(DataFileError) as info:
        sources._saved_size(d)
    assert str(info.value).startswith(f"{d}: not a dataset saved by save_to_disk (")


def test_columns_of_several_chunks_are_read_whole_and_client_ids_exactly():
    """sources._matrix and _id_column on arrow tables as readers hand them over: columns in several chunks (a
    Parquet file of several row groups) read whole; fixed-size and variable lists flattened (one row, no rows);
    a string column named as what it is, dictionary-encoded or not; integer ids as int64, string ids through their
    dictionary, an id of 256 characters kept and one of 257 refused, a missing id named."""
    import pyarrow as pa

    def two_chunks(**cols):
        first = pa.table({k: v[:3] for k, v in cols.items()})
        table = pa.concat_tables([first, pa.table({k: v[3:] for k, v in cols.items()})])
        assert table.column(next(iter(cols))).num_chunks == 2
        return table

    t = two_chunks(f=pa.array([0.5, 1.5, 2.5, 3.5, 4.5]), i=pa.array([1, 2, 3, 4, 5]),
                   emb=pa.array([[i, i + 1] for i in range(5)], pa.list_(pa.int64(), 2)),
                   var=pa.array([[i, 0, 1] for i in range(5)]),
                   cid=pa.array(["a", "b", "a", "c", "b"]).dictionary_encode(), n=pa.array([7, 8, 9, 7, 8]))
    np.testing.assert_array_equal(sources._matrix("w", t, "f"), [[0.5], [1.5], [2.5], [3.5], [4.5]])
    np.testing.assert_array_equal(sources._matrix("w", t, "emb"), [[i, i + 1] for i in range(5)])
    np.testing.assert_array_equal(sources._matrix("w", t, "var"), [[i, 0, 1] for i in range(5)])
    assert sources._matrix("w", pa.table({"v": pa.array([[3, 4]])}), "v").tolist() == [[3, 4]]  # one row
    assert sources._matrix("w", pa.table({"v": pa.array([], pa.list_(pa.int64()))}), "v").shape == (0, 0)
    for col in (pa.array(["x", "y"]), pa.array(["x", "y"]).dictionary_encode()):
        with pytest.raises(DataFileError) as info:
            sources._matrix("w", pa.table({"s": col}), "s")
        assert str(info.value) == "w: column 's' is string, not numbers (nor lists of numbers)"
    ids = sources._id_column("w", t, "cid")
    assert ids.dtype.kind == "U" and ids.tolist() == ["a", "b", "a", "c", "b"]
    n = sources._id_column("w", t, "n")
    assert n.dtype == np.int64 and n.tolist() == [7, 8, 9, 7, 8]
    assert sources._id_column("w", two_chunks(c=pa.array(["p", "q", "r", "s", "t"])), "c").tolist() == list("pqrst")
    assert sources._id_column("w", pa.table({"c": pa.array(["z" * 256])}), "c").tolist() == ["z" * 256]
    for col in (pa.array(["z" * 257, "a"]), pa.array(["z" * 257, "a"]).dictionary_encode()):
        with pytest.raises(DataFileError) as info:
            sources._id_column("w", pa.table({"c": col}), "c")
        assert str(info.value) == "w: client-id column 'c' holds an id of 257 characters; ids are at most 256"
    with pytest.raises(DataFileError) as info:
        sources._id_column("w", two_chunks(c=pa.array([1, 2, 3, None, 5])), "c")
    assert str(info.value) == "w: client-id column 'c' has 1 missing (null) values"


# -- partitioning ------------------------------------------------------------------------------------------------

LABELS = np.random.default_rng(7).integers(0, 10, 600)
WRITERS = np.random.default_rng(8).integers(0, 40, 600)


def _is_partition(parts, n, m, exact=True):
    flat = np.concatenate(parts)
    assert len(parts) == m and all(p.dtype == np.int64 for p in parts)
    assert len(np.unique(flat)) == len(flat)  # disjoint
    assert (len(flat) == n) if exact else (len(flat) <= n)
    assert flat.min() >= 0 and flat.max() < n


@pytest.mark.parametrize("scheme, m, params", [
    ("iid", 7, PartitionParams()),
    ("dirichlet", 8, PartitionParams(alpha=0.3, min_size=5)),
    ("pathological", 12, PartitionParams(classes_per_client=2)),
    ("shards", 10, PartitionParams(shards_per_client=3)),
    ("natural", 40, PartitionParams()),
    ("grouped-natural", 10, PartitionParams(group_size=4)),
])
def test_each_scheme_is_a_deterministic_partition(scheme, m, params):
    a = partition(LABELS, WRITERS, scheme, m, params, seed=3)
    b = partition(LABELS, WRITERS, scheme, m, params, seed=3)
    _is_partition(a, 600, m)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    if scheme not in ("natural", "grouped-natural"):  # the seeded schemes: another seed, another split
        c = partition(LABELS, WRITERS, scheme, m, params, seed=4)
        assert not all(np.array_equal(np.sort(u), np.sort(v)) for u, v in zip(a, c))


def test_scheme_shapes():
    iid = partition(LABELS, None, "iid", 7, seed=0)
    assert max(map(len, iid)) - min(map(len, iid)) <= 1
    assert all(len(np.unique(LABELS[p])) <= 2 for p in partition(LABELS, None, "pathological", 12, seed=0))
    assert all(len(p) == 3 * 20 for p in partition(LABELS, None, "shards", 10, PartitionParams(shards_per_client=3)))
    ids = np.sort(np.unique(WRITERS))
    for i, p in enumerate(partition(LABELS, WRITERS, "natural", 40)):
        assert set(WRITERS[p]) == {ids[i]}  # client i: every row of the i-th smallest id
    np.testing.assert_array_equal(np.sort(partition(LABELS, WRITERS, "natural", 40)[5]), np.flatnonzero(WRITERS == 5))
    groups = partition(LABELS, WRITERS, "grouped-natural", 14, PartitionParams(group_size=3))  # 40 ids: 13 x 3 + 1
    assert [sorted(set(WRITERS[p])) for p in groups][:2] == [[0, 1, 2], [3, 4, 5]]
    assert sorted(set(WRITERS[groups[-1]])) == [39]
    names = np.array([f"w{i:02d}" for i in WRITERS])
    assert set(names[partition(LABELS, names, "natural", 40)[0]]) == {"w00"}


@pytest.mark.parametrize("m, alpha, seed, min_size", [(5, 1.0, 0, 10), (9, 0.2, 11, 3), (3, 100.0, 2, 0)])
def test_dirichlet_matches_data_dirichlet_partition_bit_for_bit(m, alpha, seed, min_size):
    ours = partition(LABELS, None, "dirichlet", m, PartitionParams(alpha=alpha, min_size=min_size), seed=seed)
    theirs = dirichlet_partition(LABELS, m, alpha, seed, min_size)
    assert len(ours) == len(theirs)
    for u, v in zip(ours, theirs):
        assert u.dtype == v.dtype and np.array_equal(u, v)  # the same positions in the same order


@pytest.mark.parametrize("args, kwargs, match", [
    (("natural", 39), {}, "^scheme 'natural' makes one client per distinct id: the data hold 40 distinct ids, not "
                          "num-clients=39$"),
    (("grouped-natural", 10), {"params": PartitionParams(group_size=3)},
     "^scheme 'grouped-natural' with group_size=3 makes 14 clients from the 40 distinct ids, not num-clients=10$"),
    (("ring", 3), {}, "partition scheme must be one of"),
    (("iid", 601), {}, "^num-clients=601 exceeds the 600 examples to partition$"),
    (("iid", 0), {}, "num-clients must be a positive integer, got 0"),
    (("pathological", 5), {"params": PartitionParams(classes_per_client=11)},
     "classes_per_client=11 must lie in 1..10, the number of distinct labels"),
    (("dirichlet", 5), {"params": PartitionParams(alpha=0.0)}, "needs alpha > 0"),
    (("dirichlet", 50), {"params": PartitionParams(alpha=0.01, min_size=12, fallback="fail")},
     "^scheme 'dirichlet' over 50 clients of 600 examples: ValueError: "),
    (("dirichlet", 50), {"params": PartitionParams(alpha=0.01, min_size=13)},
     "^scheme 'dirichlet' over 50 clients of 600 examples: .*600 examples cannot give 50 clients 13 each"),
    (("dirichlet", 5), {"params": PartitionParams(fallback="retry")}, "fallback must be one of"),
    (("shards", 200), {"params": PartitionParams(shards_per_client=4)}, "600 examples cannot make 200 x 4 shards"),
])
def test_impossible_partitions_are_refused_in_one_line(args, kwargs, match):
    with pytest.raises(SplitError, match=match) as info:
        partition(LABELS, WRITERS, *args, **kwargs)
    assert "\n" not in str(info.value)


def test_each_scheme_s_bounds_hold_exactly():
    """The edges of partition's arguments, each on its allowed side and just past it: 1 and N clients; a group,
    a class, a shard per client; every class per client; shards that fill the rows exactly, of a size given (no
    incomplete shard kept); the iid split as the contiguous shares of its seeded permutation (stream 0x11D, the
    default seed 0); the rows of a client in a drawn order (shuffled), not sorted; and the messages of what is
    refused, word for word."""
    one = partition(LABELS, None, "iid", 1)
    assert len(one) == 1 and sorted(one[0]) == list(range(600))
    assert all(len(p) == 1 for p in partition(LABELS, None, "iid", 600))
    order = np.random.default_rng(np.random.SeedSequence([0, 0x11D])).permutation(600)
    assert all(np.array_equal(p, order[100 * k:100 * (k + 1)]) for k, p in enumerate(partition(LABELS, None, "iid", 6)))
    groups = partition(LABELS, WRITERS, "grouped-natural", 40, PartitionParams(group_size=1))
    assert [sorted(set(WRITERS[p])) for p in groups] == [[i] for i in range(40)]
    every = partition(LABELS, None, "pathological", 5, PartitionParams(classes_per_client=10), seed=0)
    assert all(len(np.unique(LABELS[p])) == 10 for p in every)
    single = partition(LABELS, None, "pathological", 10, PartitionParams(classes_per_client=1), seed=0)
    assert all(len(np.unique(LABELS[p])) == 1 for p in single) and not all(np.all(np.diff(p) > 0) for p in single)
    assert [len(p) for p in partition(LABELS, None, "shards", 10, PartitionParams(shards_per_client=1))] == [60] * 10
    fit = partition(LABELS, None, "shards", 10, PartitionParams(shards_per_client=3, shard_size=20))  # 10 x 3 x 20
    assert [len(p) for p in fit] == [60] * 10
    sized = partition(LABELS, None, "shards", 10, PartitionParams(shards_per_client=3, shard_size=7))  # 5 rows left
    assert [len(p) for p in sized] == [21] * 10 and not all(np.all(np.diff(p) > 0) for p in sized)
    for args, params, message in (
            (("shards", 10), PartitionParams(shards_per_client=3, shard_size=21),
             "scheme 'shards': 600 examples cannot make 10 x 3 shards of 21 examples"),
            (("shards", 200), PartitionParams(shards_per_client=4),
             "scheme 'shards': 600 examples cannot make 200 x 4 shards of at least 1 examples"),
            (("shards", 10), PartitionParams(shards_per_client=0),
             "scheme 'shards' needs shards_per_client >= 1 and shard_size >= 0, got 0 and 0"),
            (("pathological", 5), PartitionParams(classes_per_client=0),
             "scheme 'pathological': classes_per_client=0 must lie in 1..10, the number of distinct labels"),
            (("pathological", 5), PartitionParams(class_assignment="round-robin"),
             "scheme 'pathological': class_assignment must be one of ('random', 'deterministic', "
             "'first-deterministic'), got 'round-robin'"),
            (("grouped-natural", 40), PartitionParams(group_size=0),
             "scheme 'grouped-natural': group_size must be at least 1, got 0")):
        with pytest.raises(SplitError) as info:
            partition(LABELS, WRITERS, *args, params)
        assert str(info.value) == message
    for labels, ids, message in (
            (LABELS.reshape(2, 300), None, "labels must be one integer per example, got shape (2, 300) of int64"),
            (LABELS * 1.0, None, "labels must be one integer per example, got shape (600,) of float64"),
            (LABELS, WRITERS[:599], "scheme 'natural': 599 client ids for 600 examples; one per example is needed"),
            (LABELS, np.array(3), "scheme 'natural': 0 client ids for 600 examples; one per example is needed"),
            (LABELS, np.array(list(WRITERS), dtype=object),  # Python ints in an object array: no strings
             "scheme 'natural': client ids must be integers or strings, got dtype object")):
        with pytest.raises(SplitError) as info:
            partition(labels, ids, "natural", 40)
        assert str(info.value) == message


def test_natural_needs_ids():
    with pytest.raises(SplitError, match="scheme 'natural' needs a client id per example"):
        partition(LABELS, None, "natural", 3)
    with pytest.raises(SplitError, match="client ids must be integers or strings, got dtype float64"):
        partition(LABELS, WRITERS * 0.5, "natural", 40)


# -- the benchmark -----------------------------------------------------------------------------------------------

def test_benchmark_smallest_setting_runs_without_flower(tmp_path):
    out = tmp_path / "bench.json"
    code = ("import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__'); "
            "assert not [m for m in sys.modules if m == 'flwr' or m.startswith('flwr.')], 'Flower imported'")
    res = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks" / "bench_partition.py"), "--rows", "400",
                          "--clients", "4", "--out", str(out), "--md", str(tmp_path / "page.md")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"--rows 400 --clients 4 --out {out}" in (tmp_path / "page.md").read_text()
    result = json.loads(out.read_text())
    assert (result["rows"], result["clients"]) == (400, 4)
    assert set(result["steps"]) == {"read", "natural", "dirichlet", "iid"}
    assert all(s["seconds"] >= 0 and s["floor_seconds"] >= 0 for s in result["steps"].values())
    assert "natural" in res.stdout and "floor" in res.stdout


def test_the_partition_benchmarks_page_is_its_json_rendered():
    """docs/benchmark-partition.md is bench_partition.py's page of docs/benchmark-partition.json, nothing typed."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("bench_partition", ROOT / "benchmarks" / "bench_partition.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    page = (ROOT / "docs" / "benchmark-partition.md").read_text()
    command = re.search(r"```bash\n(.*)\n```", page).group(1)
    assert page == bench.markdown(json.loads((ROOT / "docs" / "benchmark-partition.json").read_text()), command)


def test_a_datasets_dict_s_splits_are_checked_and_its_training_split_found(tmp_path):
    """A DatasetDict folder: the source names its splits; an only split not named 'train' is the training part, two
    such are refused; its dataset_dict.json unreadable, not a list of splits, or a split that is a link, each refused
    in one line naming the file; the cap counts every split's files together; a folder load_from_disk cannot read
    named with its reason."""
    import re
    import shutil

    from datasets import Dataset, DatasetDict

    _save_hf(tmp_path / "tt")
    d = read_local(tmp_path / "tt")
    assert d.source.endswith(f"datasets folder {(tmp_path / 'tt').resolve()} (splits test, train)")
    ds = Dataset.from_dict({"v": [[1.0, 2.0]] * 6, "label": [0, 1] * 3})
    DatasetDict({"training": ds}).save_to_disk(str(tmp_path / "one"))
    one = read_local(tmp_path / "one")
    assert one.x.shape == (6, 2) and one.x_test is None and one.source.endswith("(splits train)")
    DatasetDict({"a": ds, "b": ds}).save_to_disk(str(tmp_path / "two"))
    _refused(f"^{tmp_path / 'two'}: splits \\['a', 'b'\\]; the training split must be named 'train'$", tmp_path / "two")
    meta = tmp_path / "tt" / "dataset_dict.json"
    size = sum(f.stat().st_size for f in (tmp_path / "tt").rglob("*.arrow"))  # every split's data files
    _refused(f"^{tmp_path / 'tt'}: its data files hold {size:,} bytes, more than the cap", tmp_path / "tt",
             cap=size - 1)
    assert read_local(tmp_path / "tt", cap=size).x.shape == (12, 8)  # exactly at the cap: taken
    plain = tmp_path / "plain"
    _save_hf(plain, dict_=False)
    assert read_local(plain).source == f"datasets folder {plain.resolve()}"  # one Dataset: no splits named
    for text, why in (("{", "unreadable \\(JSONDecodeError: Expecting property name"),
                      ('{"splits": []}', "no list of splits"), ('["train"]', "no list of splits"),
                      ('{"splits": "train"}', "no list of splits"),
                      ('{"splits": ["../train"]}', "split '../train' is not a plain name inside the folder"),
                      ("[" + " " * (1 << 20) + "]", ".*datasets dataset_dict.json")):
        meta.write_text(text)
        _refused(f"^{re.escape(str(meta))}: {why}", tmp_path / "tt")
    meta.write_text(json.dumps({"splits": ["train", "test"]}))
    shutil.move(tmp_path / "tt" / "test", tmp_path / "elsewhere")
    (tmp_path / "tt" / "test").symlink_to(tmp_path / "elsewhere")
    _refused(f"^{tmp_path / 'tt' / 'test'}: the split 'test' is not a folder \\(links to folders are not followed\\)$",
             tmp_path / "tt")
    (tmp_path / "tt" / "test").unlink()
    shutil.copytree(tmp_path / "elsewhere", tmp_path / "tt" / "test")
    state = tmp_path / "tt" / "train" / "state.json"
    kept = state.read_text()
    train = tmp_path / "tt" / "train"
    for text, want in (('{"_data_files": {}}', f"{state}: no list of data files"),
                       ("[1]", f"{state}: no list of data files"),
                       ("{", f"{train}: not a dataset saved by save_to_disk (JSONDecodeError: Expecting"),
                       ('{"_data_files": [{"filename": "gone.arrow"}]}',
                        f"{train / 'gone.arrow'}: cannot be read (File")):
        state.write_text(text)
        assert _refused("", tmp_path / "tt").startswith(want), text
    state.write_text(kept)
    arrow = next((tmp_path / "tt" / "train").glob("*.arrow"))
    arrow.write_bytes(b"\0" * arrow.stat().st_size)
    why = _refused(f"^{tmp_path / 'tt'}: cannot be loaded by datasets' load_from_disk \\(", tmp_path / "tt")
    assert "NoneType" not in why and why.endswith(")")  # the loader's own reason


def test_split_rows_keeps_the_files_own_test_part_gives_the_server_its_share_and_caps_dirichlet_s_minimum():
    """``split_rows`` on N training rows followed by the file's own test rows: those are the test set; server-fraction
    of the training rows go to the server; the rest are split over m clients by the scheme with its parameters, a
    Dirichlet minimum above what m clients can each have lowered to it; more clients than rows refused."""
    import dataclasses

    from zofl.tasks.data import cut_rows
    from zofl.tasks.sources import split_rows

    labels = np.arange(60) % 3
    params = PartitionParams(alpha=0.5, min_size=100)
    s = split_rows(labels, None, 10, "dirichlet", 4, params, 0.2, 1)
    assert np.array_equal(s.test, np.arange(50, 60)) and len(s.server) == 10
    assert np.array_equal(np.sort(np.concatenate([s.server, *s.clients])), np.arange(50))
    assert all(len(c) >= 10 for c in s.clients)  # min-size 100 lowered to the 40 rows' share, 40 // 4
    rest = np.setdiff1d(np.arange(50), s.server)
    _, _, order = cut_rows(50, 10, 0.2, 1)
    want = partition(labels[order], None, "dirichlet", 4, dataclasses.replace(params, min_size=10), 1)
    assert [np.array_equal(c, order[p]) for c, p in zip(s.clients, want)] == [True] * 4
    assert set(rest) == set(order)
    other = split_rows(labels, None, 10, "dirichlet", 4, PartitionParams(alpha=1000.0, min_size=100), 0.2, 1)
    assert any(len(a) != len(b) or np.any(a != b) for a, b in zip(s.clients, other.clients))  # alpha is used
    assert len(split_rows(labels, None, 10, "iid", 40, params, 0.2, 1).clients) == 40  # 40 rows, 40 clients
    with pytest.raises(SplitError, match="^num-clients=41 exceeds the 40 examples left to the clients$"):
        split_rows(labels, None, 10, "iid", 41, params, 0.2, 1)


# -- reading: the messages and edges each reader owns ------------------------------------------------------------

def test_unreadable_files_are_refused_with_the_reader_s_own_error_named(tmp_path):
    """A file a reader cannot read is refused in one line naming the file and the reader's error by its type: a CSV
    row of too many values, a Parquet file without its magic bytes, a file named with its format that is not there,
    a save_to_disk folder whose arrow file was zeroed."""
    (tmp_path / "m.csv").write_text("a,label\n1,0\n2,1,3\n")
    _refused(f"^{tmp_path / 'm.csv'}: cannot be read as a CSV file with a header row \\(ArrowInvalid: CSV parse "
             f"error: Expected 2 columns, got 3: 2,1,3\\)$", tmp_path / "m.csv")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    _refused(f"^{tmp_path / 'bad.parquet'}: cannot be read as a Parquet file \\(ArrowInvalid: Parquet magic bytes "
             f"not found in footer", tmp_path / "bad.parquet")
    for fmt in ("csv", "parquet"):
        gone = tmp_path / f"gone.{fmt}"
        _refused(f"^{gone}: cannot be read \\(FileNotFoundError: \\[Errno 2\\] No such file or directory: ", gone,
                 fmt=fmt)
    _save_hf(tmp_path / "hf", dict_=False)
    arrow = next((tmp_path / "hf").glob("*.arrow"))
    arrow.write_bytes(b"\0" * arrow.stat().st_size)
    _refused(f"^{tmp_path / 'hf'}: cannot be loaded by datasets' load_from_disk \\(ArrowInvalid: ", tmp_path / "hf")


def test_csv_columns_are_checked_as_named_and_the_refusal_names_the_file(tmp_path):
    """A CSV file's columns are checked before its values are: a missing label column, no numeric feature besides
    the label (the id column and the label neither counted nor listed among the others), a feature named that is
    not numbers, each refused in one line beginning with the file."""
    def csv(name, text):
        (tmp_path / name).write_text(text)
        return tmp_path / name

    p = csv("a.csv", "s,label\nx,0\ny,1\n")
    _refused(f"^{p}: no label column 'y'; its columns are \\['s', 'label'\\]$", p, label_column="y")
    _refused(f"^{p}: column 's' is string, not numbers \\(nor lists of numbers\\)$", p, feature_columns="s")
    p = csv("b.csv", "s,label\nx,cat\ny,dog\n")
    _refused(f"^{p}: no numeric feature columns besides 'label'; the others are \\{{'s': 'string'\\}}$", p)
    p = csv("c.csv", "s,w,label\nx,a,0\ny,b,1\n")
    _refused(f"^{p}: no numeric feature columns besides 'label'; the others are \\{{'s': 'string'\\}}$", p,
             id_column="w")


def test_boolean_and_fixed_size_list_columns_are_features(tmp_path):
    """By default every column of numbers is a feature: booleans (as 0 and 1) and fixed-size lists (flattened) too."""
    emb = pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float64(), 2))
    pq.write_table(pa.table({"emb": emb, "b": [True, False, True], "label": [0, 1, 0]}), tmp_path / "t.parquet")
    d = read_local(tmp_path / "t.parquet")
    np.testing.assert_array_equal(d.x, [[1, 2, 1], [3, 4, 0], [5, 6, 1]])
    (tmp_path / "b.csv").write_text("b,label\ntrue,0\nfalse,1\n")
    np.testing.assert_array_equal(read_local(tmp_path / "b.csv").x, [[1], [0]])


def test_a_table_s_label_column_is_one_label_per_example_as_in_an_npz(tmp_path):
    """A table's label column of numbers gives the same labels as an npz's y, fingerprint included; a column of
    lists of several labels per example is refused as one-hot."""
    pq.write_table(_table(), tmp_path / "t.parquet")
    d = read_local(tmp_path / "t.parquet", id_column="writer")
    assert d.fingerprint == array_fingerprint(X, Y, IDS)
    pq.write_table(pa.table({"f": X[:3, 0], "label": pa.array(np.eye(3, dtype=np.int64).tolist())}),
                   tmp_path / "h.parquet")
    _refused("labels of 'examples' have shape \\(3, 3\\); they look one-hot", tmp_path / "h.parquet")


def test_column_refusals_name_the_file_or_its_test_split(tmp_path):
    """A column refused while the parts are built is named after the file (or folder) it is in, and after the split
    'test' when it is in a save_to_disk dataset's test split: a missing label, missing values in a feature, labels
    that are not numbers, client ids that are neither integers nor strings."""
    from datasets import Dataset, DatasetDict

    t = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": pa.array([1.0, None]), "label": [0, 1], "w": [0.5, 1.5]}), t)
    _refused(f"^{t}: column 'v' has 1 missing \\(null\\) values$", t)
    pq.write_table(pa.table({"v": [1.0, 2.0], "label": ["cat", "dog"], "w": [0.5, 1.5]}), t)
    _refused(f"^{t}: column 'label' is string, not numbers \\(nor lists of numbers\\)$", t, feature_columns="v")
    pq.write_table(pa.table({"v": [1.0, 2.0], "label": [0, 1], "w": [0.5, 1.5]}), t)
    _refused(f"^{t}: client-id column 'w' is double; client ids must be integers or strings$", t, id_column="w")
    good = Dataset.from_dict({"v": [1.0, 2.0, 3.0], "label": [0, 1, 0]})
    Dataset.from_dict({"v": [1.0, 2.0], "y": [0, 1]}).save_to_disk(str(tmp_path / "nolabel"))
    _refused(f"^{tmp_path / 'nolabel'}: no label column 'label'; its columns are \\['v', 'y'\\]$", tmp_path / "nolabel")
    DatasetDict({"train": good, "test": Dataset.from_dict({"v": [1.0, None], "label": [0, 1]})}).save_to_disk(
        str(tmp_path / "dd"))
    _refused(f"^{tmp_path / 'dd'} \\(split 'test'\\): column 'v' has 1 missing \\(null\\) values$", tmp_path / "dd")


def test_the_search_for_a_saved_dataset_looks_at_max_entries_files_and_folders_in_all(tmp_path, monkeypatch):
    """The files and folders looked at are counted over the whole search: exactly MAX_ENTRIES of them is fine, one
    more (over several folders, none alone above the limit) is refused in one line."""
    monkeypatch.setattr(sources, "MAX_ENTRIES", 5)
    _save_hf(tmp_path / "ok", dict_=False)
    names = os.listdir(tmp_path / "ok")
    for i in range(5 - len(names)):
        (tmp_path / "ok" / f"junk{i}").write_text("")
    assert read_local(tmp_path / "ok").x.shape == (12, 8)  # 5 entries: taken
    for sub in ("a", "b"):
        (tmp_path / "many" / sub).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "many" / sub / f"f{i}").write_text("")
    _refused(f"^{tmp_path / 'many'}: more than 5 files and folders searched for a dataset saved by datasets' "
             f"save_to_disk; name its folder$", tmp_path / "many")  # 2 + 3 + 3


@pytest.mark.parametrize("name", ["", ".", "..", "a\\b.arrow", 3, None])
def test_a_saved_dataset_s_data_file_must_be_a_plain_name_in_its_folder(tmp_path, name):
    d = tmp_path / "saved"
    d.mkdir()
    (d / "dataset_info.json").write_text("{}")
    (d / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
    with pytest.raises(DataFileError) as info:
        sources._saved_size(d)
    assert str(info.value) == f"{d / 'state.json'}: data file {name!r} is not a plain name inside the folder"


def test_an_oversized_datasets_json_file_is_refused_by_its_name(tmp_path):
    """state.json, dataset_info.json and dataset_dict.json are read bounded (1 MiB): each refusal says which."""
    d = tmp_path / "saved"
    d.mkdir()
    big = "[" + " " * (1 << 20) + "]"
    (d / "dataset_info.json").write_text("{}")
    for name, ok in (("state.json", "dataset_info.json"), ("dataset_info.json", "state.json")):
        (d / ok).write_text("{}")
        (d / name).write_text(big)
        with pytest.raises(DataFileError) as info:
            sources._saved_size(d)
        assert str(info.value) == (f"{d / name}: 1,048,578 bytes, more than the 1 MiB (1,048,576 bytes) a datasets "
                                   f"{name} may be")
    _save_hf(tmp_path / "tt")
    (tmp_path / "tt" / "dataset_dict.json").write_text(big)
    _refused(f"^{tmp_path / 'tt' / 'dataset_dict.json'}: 1,048,578 bytes, more than the 1 MiB \\(1,048,576 bytes\\) a "
             f"datasets dataset_dict.json may be$", tmp_path / "tt")


def test_client_ids_of_an_npz_must_be_one_integer_or_string_per_example(tmp_path):
    p = tmp_path / "a.npz"
    for ids, shape in ((np.zeros((4, 2), int), "\\(4, 2\\)"), (np.zeros(3, int), "\\(3,\\)")):
        np.savez(p, x=X[:4], y=Y[:4], ids=ids)
        _refused(f"^{p}: client ids must be one value per example \\(4\\), got shape {shape}$", p, id_column="ids")
    np.savez(p, x=X[:4], y=Y[:4], ids=np.zeros(4))
    _refused(f"^{p}: client ids must be integers or strings, got dtype float64$", p, id_column="ids")
    np.savez(p, x=X[:4], y=Y[:4], ids=np.array(["a", "b", "a", "c"]))
    assert read_local(p, id_column="ids").ids.tolist() == ["a", "b", "a", "c"]


def test_a_loader_is_the_function_after_the_first_colon():
    """Named as a loader, ``module:function`` is split at its first colon: no colon names no function, a second
    colon is part of the function's name; each refused in one line."""
    _refused("^loader 'json': module 'json' has no attribute ''$", "json", fmt="loader")
    _refused("^loader 'json:decoder:JSONDecoder': module 'json' has no attribute 'decoder:JSONDecoder'$",
             "json:decoder:JSONDecoder", fmt="loader")


def test_parquet_reads_only_the_needed_columns_strings_dictionary_encoded(tmp_path):
    """From a Parquet file only the columns asked for are read (in file order), strings dictionary-encoded: what the
    decoded-size cap counted."""
    pq.write_table(_table(), tmp_path / "t.parquet")
    t = sources._parquet_table(tmp_path / "t.parquet", 1 << 20, "label", ["f1"], "name")
    assert t.column_names == ["name", "f1", "label"]
    assert pa.types.is_dictionary(t.schema.field("name").type)
    assert t.column("name").to_pylist()[:2] == ["row0", "row1"]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_every_string_and_bytes_id_column_is_read_dictionary_encoded(tmp_path, kind):
    """Each of arrow's four text and bytes types (``_text_leaf``) is read through a dictionary: an id column of large
    strings or bytes costs its distinct values once, not once per row."""
    ids = pa.array([b"s1", b"s2", b"s1"] if pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                   else ["s1", "s2", "s1"], type=kind)
    pq.write_table(pa.table({"site": ids, "f": [1.0, 2.0, 3.0], "label": [0, 1, 0]}), tmp_path / "k.parquet")
    t = sources._parquet_table(tmp_path / "k.parquet", 1 << 20, "label", ["f"], "site")
    assert pa.types.is_dictionary(t.schema.field("site").type)  # (pyarrow gives large values back as plain ones)


def test_parquet_decoded_exactly_at_the_cap_is_taken(tmp_path):
    pq.write_table(pa.table({"f": np.zeros(50_000), "label": np.zeros(50_000, dtype=np.int64)}),
                   tmp_path / "z.parquet", compression="zstd")
    need = sources._decoded_bytes(pq.ParquetFile(tmp_path / "z.parquet"), {"f", "label"})
    assert read_local(tmp_path / "z.parquet", cap=need).x.shape == (50_000, 1)
    _refused(f"its columns take {need:,} bytes decoded", tmp_path / "z.parquet", cap=need - 1)


# -- partitioning: edges ------------------------------------------------------------------------------------------

def test_natural_ids_given_as_python_strings_in_an_object_array_are_strings():
    names = np.array([f"w{i:02d}" for i in WRITERS])
    got = partition(LABELS, names.astype(object), "natural", 40)
    assert all(np.array_equal(u, v) for u, v in zip(got, partition(LABELS, names, "natural", 40)))


def test_dirichlet_keeps_labels_apart_however_large():
    """Labels are compared as the integers they are: 2**53 and 2**53 + 1 (one float64) are two classes."""
    labels = np.array([2**53, 2**53 + 1] * 20, dtype=np.int64)
    ours = partition(labels, None, "dirichlet", 3, PartitionParams(alpha=0.5, min_size=0), seed=1)
    theirs = dirichlet_partition(labels, 3, 0.5, 1, 0)
    assert [p.tolist() for p in ours] == [p.tolist() for p in theirs]


def test_pathological_class_assignment_is_the_mode_asked_for():
    """'deterministic': client i holds classes i, i+1, ... (mod the number of classes); 'first-deterministic' (the
    default): client i holds class i (mod) and others drawn."""
    det = partition(LABELS, None, "pathological", 12, PartitionParams(class_assignment="deterministic"), seed=0)
    assert [set(LABELS[p].tolist()) for p in det] == [{i % 10, (i + 1) % 10} for i in range(12)]
    first = partition(LABELS, None, "pathological", 12, seed=0)
    assert all(i % 10 in set(LABELS[p].tolist()) for i, p in enumerate(first))


def test_shards_leave_the_incomplete_shard_out_and_shuffle_each_client_s_rows():
    """605 rows over 10 x 3 shards: shards of 20 rows, the 5 rows left over in none; each client's rows in a drawn
    order, not label by label in file order as the shards hold them."""
    labels = np.arange(605) % 10
    for seed in range(3):
        parts = partition(labels, None, "shards", 10, PartitionParams(shards_per_client=3), seed=seed)
        assert [len(p) for p in parts] == [60] * 10
    one = partition(LABELS, None, "shards", 10, PartitionParams(shards_per_client=1), seed=0)
    assert not all(np.array_equal(p, p[np.lexsort((p, LABELS[p]))]) for p in one)


def test_shards_of_one_row_each_when_rows_divide_unevenly():
    """21 rows over 19 clients of one shard: shards of one row (21 / 19 in floating point times 19 is above 21)."""
    parts = partition(np.arange(21) % 3, None, "shards", 19, PartitionParams(shards_per_client=1))
    assert [len(p) for p in parts] == [1] * 19


def test_split_rows_lowers_the_dirichlet_minimum_to_a_whole_number_of_examples():
    """51 rows left to 7 clients: a min-size of 100 is lowered to 51 // 7 = 7 examples (as the refusal of alpha = 0
    says), not to 7.29."""
    from zofl.tasks.sources import split_rows

    with pytest.raises(SplitError) as info:
        split_rows(np.arange(63) % 3, None, 0, "dirichlet", 7, PartitionParams(alpha=0.0, min_size=100), 0.1, 0)
    assert str(info.value) == "scheme 'dirichlet' needs alpha > 0 and min_size >= 0, got alpha=0.0, min_size=7"


def test_a_nested_column_of_no_numbers_in_parquet_is_refused_in_one_line_naming_it(tmp_path):
    """A list-of-strings or struct column named as features or client ids is refused like any column of no numbers
    (pyarrow dictionary-encodes only leaf columns: asking it for a nested one was a bare KeyError)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"v": [1.0, 2.0], "label": [0, 1], "tags": pa.array([["a"], ["b"]]),
                             "s": pa.array([{"a": 1}, {"a": 2}])}), path)
    for keys, words in [({"feature_columns": "tags"}, "column 'tags' is string, not numbers"),
                        ({"feature_columns": "s"}, "column 's' is struct<a: int64>, not numbers"),
                        ({"id_column": "tags"}, "client-id column 'tags' is list<element: string>; client ids must be"),
                        ({"id_column": "s"}, "client-id column 's' is struct<a: int64>; client ids must be")]:
        with pytest.raises(DataFileError, match=re.escape(f"{path}: {words}")):
            read_local(str(path), **keys)
