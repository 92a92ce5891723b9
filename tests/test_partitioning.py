"""Issue 48, item 5: any dataset in simulation. Run-config data-path names a file of the user's (read as in a node
config: zofl.tasks.sources.read_local) and partitioner splits it over the simulated clients with flwr-datasets'
partitioners; the built-in datasets' Dirichlet split is unchanged (tests/test_engines.py pins its numbers). On the
in-process Grid (the Ray simulation on natural partitions of a Parquet file: tests/test_ray_cluster.py)."""
import json

import numpy as np
import pandas as pd
import pytest

from zofl.config import ConfigError
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.setup import data_spec, prepare

RUN = {"strategy": "fedavg", "num-rounds": 2, "beta": 1.0}


def sites_parquet(path, sites=(0, 1, 2, 3, 4), n=1500, width=12, seed=0):
    """Rows of ``len(sites)`` sites (a 'site' column, never a feature), labels a function of the features."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    frame = pd.DataFrame(rng.normal(0, 1, (n, width)) + 2.0 * np.eye(4, width)[y],
                         columns=[f"f{j}" for j in range(width)])
    frame["label"] = y
    frame["site"] = np.asarray(sites)[rng.integers(0, len(sites), n)]
    frame.to_parquet(path)
    return frame


def test_natural_partitions_give_each_client_the_rows_of_one_site(tmp_path):
    frame = sites_parquet(tmp_path / "sites.parquet", sites=("lyon", "oslo", "pune", "lima", "kobe"))
    cfg = {**RUN, "data-path": str(tmp_path / "sites.parquet"), "client-column": "site", "partitioner": "natural",
           "num-clients": 5, "server-fraction": 0.0}
    _, task, spec = prepare(cfg)
    x_all = frame[[f"f{j}" for j in range(12)]].to_numpy(np.float32)
    names = sorted(frame["site"].unique())  # client i: the i-th smallest site id
    test_rows = {tuple(r) for r in task.test_data(spec).x}
    for pid, site in enumerate(names):
        own = x_all[frame["site"].to_numpy() == site]
        got = task.client_data(spec, pid).x
        assert {tuple(r) for r in got} == {tuple(r) for r in own} - test_rows  # that site's rows, less the test set
        assert task.client_data(spec, pid).x.shape[1] == 12  # the site column is no feature
    d, _ = run_inprocess({**cfg, "output-dir": str(tmp_path), "run-name": "natural"}, workers=0)
    assert [r["participants"] for r in read_rounds(d)] == [0, 5, 5]
    stored = json.loads((d / "data.json").read_text())
    assert stored["dataset"] == "sites.parquet" and len(stored["fingerprint"]) > 16


@pytest.mark.parametrize("partitioner, extra", [("iid", {}), ("pathological", {"classes-per-client": 2}),
                                                ("shards", {"shards-per-client": 2}), ("dirichlet", {"alpha": 0.3})])
def test_every_partitioner_splits_a_csv_file_and_runs(tmp_path, partitioner, extra):
    frame = sites_parquet(tmp_path / "s.parquet")
    frame.drop(columns="site").to_csv(tmp_path / "s.csv", index=False)
    cfg = {**RUN, "data-path": str(tmp_path / "s.csv"), "partitioner": partitioner, "num-clients": 4, **extra}
    _, task, spec = prepare(cfg)
    sizes = [len(task.client_data(spec, i)) for i in range(4)]
    assert all(s > 0 for s in sizes) and sum(sizes) <= round(0.7 * 0.9 * 1500) + 1
    if partitioner == "pathological":
        assert all(len(np.unique(task.client_data(spec, i).y)) <= 2 for i in range(4))
    if partitioner == "iid":
        assert max(sizes) - min(sizes) <= 1
    d, _ = run_inprocess({**cfg, "output-dir": str(tmp_path), "run-name": partitioner}, workers=0)
    assert read_rounds(d)[-1]["test_acc"] is not None


def test_a_file_with_a_test_part_of_its_own_keeps_it_as_the_test_set(tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(300, 6)), rng.integers(0, 3, 300)
    np.savez(tmp_path / "k.npz", x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    _, task, spec = prepare({**RUN, "data-path": str(tmp_path / "k.npz"), "num-clients": 3, "partitioner": "iid"})
    np.testing.assert_array_equal(task.test_data(spec).x, x[240:].astype(np.float32))


def test_grouped_natural_partitions_and_the_splits_are_a_function_of_the_keys(tmp_path):
    sites_parquet(tmp_path / "s.parquet", sites=tuple(range(6)))
    cfg = {**RUN, "data-path": str(tmp_path / "s.parquet"), "client-column": "site", "partitioner": "grouped-natural",
           "group-size": 2, "num-clients": 3}
    _, task, spec = prepare(cfg)
    first = [task.client_data(spec, i).y.copy() for i in range(3)]
    assert data_spec(prepare(cfg)[0]) == spec
    from zofl.tasks.data import release_data

    release_data()
    assert all(np.array_equal(a, task.client_data(spec, i).y) for i, a in enumerate(first))


@pytest.mark.parametrize("keys, words", [
    ({"partitioner": "natural", "client-column": "site", "num-clients": 4},
     "'partitioner'.*one client per distinct id: the data hold 5 distinct ids, not num-clients=4"),
    ({"partitioner": "natural", "num-clients": 5}, "needs a client id per example"),
    ({"label-column": "y", "num-clients": 3}, "'data-path'.*"),
    ({"feature-columns": "f0,nope", "num-clients": 3}, "'data-path'.*nope"),
])
def test_a_file_or_split_that_cannot_be_used_is_refused_naming_the_key(tmp_path, keys, words):
    sites_parquet(tmp_path / "s.parquet")
    with pytest.raises(ConfigError, match=words):
        prepare({**RUN, "data-path": str(tmp_path / "s.parquet"), **keys})


def test_a_missing_data_path_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"run-config key 'data-path'.*no-such\.parquet"):
        prepare({**RUN, "data-path": str(tmp_path / "no-such.parquet")})


def test_a_declared_shape_the_data_do_not_have_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"run-config key 'num-features' = 20, but the run's data \(digits\) have 64"):
        prepare({**RUN, "num-features": 20})
    sites_parquet(tmp_path / "s.parquet")
    with pytest.raises(ConfigError, match=r"'data-path'.*s.parquet: 12 features per example, but the task declares "
                                          r"num_features=13"):
        prepare({**RUN, "data-path": str(tmp_path / "s.parquet"), "client-column": "site", "num-features": 13,
                 "num-classes": 4})
    prepare({**RUN, "data-path": str(tmp_path / "s.parquet"), "client-column": "site", "num-features": 12,
             "num-classes": 4})


@pytest.mark.parametrize("cache", [True, False])
def test_a_files_split_is_the_partitioner_s_with_every_split_key_of_the_run(tmp_path, cache):
    """alpha, min-partition-size, split-fallback and a scheme's own keys reach the split of a user's file, with and
    without the split cache: the clients' rows are those of sources.split_rows called with them."""
    from zofl.tasks.base import splits_of
    from zofl.tasks.sources import PartitionParams, split_rows

    frame = sites_parquet(tmp_path / "s.parquet", n=600)
    base = {**RUN, "data-path": str(tmp_path / "s.parquet"), "num-clients": 6, "split-cache": cache,
            "data-dir": str(tmp_path / "d")}
    y = frame["label"].to_numpy()
    for keys, params in [({"alpha": 0.05, "min-partition-size": 3, "split-fallback": "top-up"},
                          PartitionParams(alpha=0.05, min_size=3, fallback="top-up")),
                         ({"alpha": 0.05, "min-partition-size": 60, "split-fallback": "top-up"},
                          PartitionParams(alpha=0.05, min_size=60, fallback="top-up")),
                         ({"partitioner": "pathological", "classes-per-client": 3},
                          PartitionParams(classes_per_client=3))]:
        _, task, spec = prepare({**base, **keys})
        scheme = keys.get("partitioner", "dirichlet")
        want = split_rows(y, None, 0, scheme, 6, params, spec.server_fraction, spec.seed)
        got = splits_of(spec)
        for a, b in zip(got.clients, want.clients, strict=True):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ConfigError, match="split-fallback"):  # 'fail' reaches it too: 60 each is more than alpha gives
        prepare({**base, "alpha": 0.05, "min-partition-size": 60, "split-fallback": "fail"})


def test_a_data_file_replaced_in_the_same_process_is_split_anew(tmp_path):
    """The split of a file is keyed by its version: rewritten with other rows, the next run's split covers the new
    rows (none read from the old file's cached copy), with and without the split cache."""
    for cache in (True, False):
        path = tmp_path / f"s{cache}.csv"
        sites_parquet(tmp_path / "s.parquet", n=300).drop(columns="site").to_csv(path, index=False)
        cfg = {**RUN, "data-path": str(path), "num-clients": 3, "partitioner": "iid", "split-cache": cache,
               "data-dir": str(tmp_path / "d")}
        _, task, spec = prepare(cfg)
        assert sum(len(task.client_data(spec, i)) for i in range(3)) == round(0.7 * 270)
        sites_parquet(tmp_path / "s.parquet", n=900, seed=1).drop(columns="site").to_csv(path, index=False)
        _, task, spec = prepare(cfg)
        assert sum(len(task.client_data(spec, i)) for i in range(3)) == round(0.7 * 810)


def test_a_built_in_dataset_split_by_another_scheme_keeps_the_papers_test_set(tmp_path):
    """A built-in dataset under partitioner = iid: the test set is the papers' (TEST_FRACTION of the rows, drawn by
    the seed, as under the Dirichlet split), the rest shared among the clients."""
    from zofl.tasks.base import splits_of

    _, _, spec = prepare({**RUN, "num-clients": 4, "split-cache": False})
    _, _, spec_iid = prepare({**RUN, "num-clients": 4, "partitioner": "iid", "split-cache": False})
    np.testing.assert_array_equal(splits_of(spec_iid).test, splits_of(spec).test)
