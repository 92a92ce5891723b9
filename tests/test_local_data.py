"""Issue 48: a SuperNode's own data, named by its node config (zofl.tasks.local), on the in-process Grid (the same
ServerApp and ClientApp code as every engine). The real-process deployment is in tests/test_deploy.py."""
import json

import numpy as np
import pytest

from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.tasks.local import NodeData, NodeDataError, read_node_data, summary


def site_file(path, n: int, seed: int, width: int = 64, fmt: str = "npz"):
    """A site's examples shaped as the built-in digits (64 features, 10 classes), labels a function of the
    features so that a model can learn them."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.normal(0.0, 1.0, (n, width)) + 3.0 * np.eye(10, width)[y]
    if fmt == "npz":
        np.savez(path, x=x, y=y)
    else:
        import pandas as pd

        frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(width)])
        frame["label"] = y
        frame.to_csv(path, index=False)
    return path


def nodes(tmp_path, sizes, **extra):
    """Node configs {partition: config} of len(sizes) sites, site i holding sizes[i] examples of its own."""
    m = len(sizes)
    return {i: {PARTITION_ID: i, NUM_PARTITIONS: m, "data-path": str(site_file(tmp_path / f"site{i}.npz", n, i)),
                **extra.get(i, {})} for i, n in enumerate(sizes)}


def test_node_config_keys_are_parsed_and_checked():
    assert NodeData.of({PARTITION_ID: 0, NUM_PARTITIONS: 2}) is None  # no data of its own: the run's partition
    nd = NodeData.of({"data-path": " /srv/a.csv ", "label-column": "y", "test-fraction": 0.25})
    assert (nd.path, nd.label_column, nd.test_fraction) == ("/srv/a.csv", "y", 0.25)
    for bad, words in [({"test-fraction": 0.2}, "given without 'data-path'"),
                       ({"data-path": "a.npz", "test-fraction": 1.5}, "'test-fraction' must be a number in (0, 1)"),
                       ({"data-path": "a.npz", "test-fraction": True}, "'test-fraction' must be a number"),
                       ({"data-path": ""}, "'data-path' is empty"),
                       ({"data-path": "a" * 5000}, "'data-path' must be a string of at most 4096"),
                       ({"data-path": 3}, "'data-path' must be a string"),
                       ({"data-path": "a.npz", "data-format": "xlsx"}, "'data-format' must be 'auto' or one of"),
                       ({"data-path": "a.csv", "label-column": " "}, "'label-column' is empty")]:
        with pytest.raises(NodeDataError, match=words.replace("(", r"\(").replace(")", r"\)")):
            NodeData.of(bad)


def test_a_nodes_data_are_read_checked_and_summarised_without_their_path(tmp_path):
    path = site_file(tmp_path / "a.csv", 50, 0, fmt="csv")
    data = read_node_data(NodeData.of({"data-path": str(path)}), 64, 10, seed=0)
    assert data.x.shape == (45, 64) and data.x_test.shape == (5, 64)  # test-fraction 0.1 of 50
    told = summary(data)
    assert told == {"num-examples": 45, "data-fingerprint": data.fingerprint, "num-features": 64, "num-classes": 10}
    assert str(tmp_path) not in json.dumps(told)
    again = read_node_data(NodeData.of({"data-path": str(path)}), 64, 10, seed=0)
    assert again is data  # once per process and version of the file
    with pytest.raises(NodeDataError, match=r"node config key 'data-path': .*a\.csv.*64"):
        read_node_data(NodeData.of({"data-path": str(site_file(tmp_path / "a.csv", 50, 0, width=63, fmt="csv"))}),
                       64, 10, seed=0)  # replaced in place by a file of the wrong width: read again, refused


@pytest.mark.parametrize("strategy", ["fedavg", "zohfl"])
def test_each_node_trains_on_its_own_data_and_rho_comes_from_the_reported_sizes(tmp_path, strategy):
    """Three sites of 40, 80 and 120 examples: the run trains (its test accuracy, on the server's test set of the
    digits, rises), FedAvg's weights and ZO-HFL's rho_i = N_i / N_train use the reported sizes."""
    import zofl.inprocess as inprocess

    seen = {}
    serve = inprocess.serve

    def spy(grid, cfg, method, writer):
        x = serve(grid, cfg, method, writer)
        seen["n_train"], seen["sizes"] = method.n_train, dict(method.reported_sizes)
        seen["split"] = method.split_n_train - sum(len(method.task.client_data(method.spec, i)) for i in range(3))
        return x

    cfg = {"strategy": strategy, "num-clients": 3, "beta": 1.0, "tau": 2.0, "num-rounds": 4, "server-fraction": 0.3,
           "output-dir": str(tmp_path), "run-name": strategy}
    if strategy == "zohfl":
        cfg["weighting"] = "rho"
    inprocess.serve = spy
    try:
        d, x = run_inprocess(cfg, workers=0, node_config=nodes(tmp_path, [40, 80, 120]))
    finally:
        inprocess.serve = serve
    assert seen["sizes"] == {0: 36, 1: 72, 2: 108}  # 90% of each site's examples train, 10% are held out
    assert seen["n_train"] == seen["split"] + 36 + 72 + 108  # the server's share + what the nodes reported
    rec = read_rounds(d)
    assert all(r["participants"] == 3 for r in rec[1:]) and np.isfinite(x).all()
    summary_ = json.loads((d / "summary.json").read_text())
    assert summary_["status"] == "ok" and not summary_["refused_nodes"]


def test_a_node_whose_data_do_not_fit_is_refused_alone_and_named(tmp_path):
    """Site 1's file has 63 features where the run's task has 64: it is refused before round 1 (in the summary,
    with what was wrong), gets no work, and the two others' run goes on."""
    configs = nodes(tmp_path, [40, 60, 50])
    configs[1]["data-path"] = str(site_file(tmp_path / "narrow.npz", 60, 1, width=63))
    cfg = {"strategy": "fedavg", "num-clients": 3, "beta": 1.0, "tau": 1.0, "num-rounds": 2, "client-wait-s": 1.0,
           "output-dir": str(tmp_path), "run-name": "r"}
    d, x = run_inprocess(cfg, workers=0, node_config=configs)
    summary_ = json.loads((d / "summary.json").read_text())
    (refused,) = summary_["refused_nodes"]
    assert refused["claims"] == 1 and refused["held_by"] == -2, refused
    assert "'data-path'" in refused["reason"] and "narrow.npz" not in refused["reason"] and "64" in refused["reason"]
    assert summary_["unheld_partitions"] == [1]
    assert all(r["participants"] == 2 for r in read_rounds(d)[1:])


def test_a_resume_refuses_a_node_whose_data_changed_since_the_run_began(tmp_path):
    """data.json keeps each node's fingerprint; on resume, site 2's file replaced by other examples is refused alone
    (named, with both fingerprints), the two others go on, and the run's records say so."""
    configs = nodes(tmp_path, [40, 60, 50])
    cfg = {"strategy": "fedavg", "num-clients": 3, "beta": 1.0, "tau": 1.0, "num-rounds": 2, "checkpoint-every": 1,
           "client-wait-s": 1.0, "output-dir": str(tmp_path), "run-name": "r"}
    d, _ = run_inprocess(cfg, workers=0, node_config=configs)
    stored = json.loads((d / "data.json").read_text())["clients"]
    assert sorted(stored) == ["0", "1", "2"] and len(set(stored.values())) == 3
    site_file(tmp_path / "site2.npz", 50, seed=99)  # the same size, other examples
    d, x = run_inprocess({**cfg, "num-rounds": 4, "resume": True}, workers=0, node_config=configs)
    summary_ = json.loads((d / "summary.json").read_text())
    (refused,) = summary_["refused_nodes"]
    assert refused["claims"] == 2 and refused["held_by"] == -2
    assert "changed since the run began" in refused["reason"] and stored["2"] in refused["reason"]
    assert summary_["unheld_partitions"] == [2] and np.isfinite(x).all()
    assert all(r["participants"] == 2 for r in read_rounds(d)[3:])
    assert json.loads((d / "data.json").read_text())["clients"] == stored  # the run's own, kept


def test_a_node_rejoining_mid_run_with_other_data_is_refused_alone(tmp_path):
    """Partition 1's node dies in round 2 and a new node claims partition 1 from round 4: with the same file it
    takes the partition over (as any restarted SuperNode); with another file it is refused, named, and partition
    1 stays unheld (each round that samples it counts a failure) while the others go on."""
    cfgs = nodes(tmp_path, [40, 60, 100])
    keys = {"num-rounds": 6, "num-clients": 3, "beta": 1.0, "tau": 1.0, "round-deadline-s": 2.0,
            "max-failed-rounds": 1.0, "output-dir": str(tmp_path / "out")}
    same, _ = run_inprocess({**keys, "run-name": "same"}, workers=0, node_config=cfgs, restart={1: (2, 4)})
    other = {**cfgs[1], "data-path": str(site_file(tmp_path / "other.npz", 60, 7))}
    changed, _ = run_inprocess({**keys, "run-name": "other"}, workers=0, node_config=cfgs, restart={1: (2, 4, other)})
    s_same = json.loads((same / "summary.json").read_text())
    assert [r["partition"] for r in s_same["rejoined_nodes"]] == [1] and not s_same["refused_nodes"]
    s_other = json.loads((changed / "summary.json").read_text())
    assert s_other["status"] == "ok" and not s_other["rejoined_nodes"]
    (refused,) = s_other["refused_nodes"]
    assert refused["claims"] == 1 and "a node rejoining mid-run must hold the same data" in refused["reason"]
    assert [1 in r["failed_clients"] for r in read_rounds(changed)[1:]] == [False, False, True, True, True, True]


def test_why_a_nodes_data_are_refused_reaches_the_server_without_their_path(tmp_path, caplog):
    """The reason a node gives the server names the node-config key, never where the file lives; the node's own
    log names the file."""
    bad = site_file(tmp_path / "hidden-site" / "w.npz" if (tmp_path / "hidden-site").mkdir() is None else None, 30, 0,
                    width=30)
    cfgs = nodes(tmp_path, [40, 60])
    cfgs[1]["data-path"] = str(bad)
    d, _ = run_inprocess({"num-rounds": 1, "num-clients": 2, "beta": 1.0, "output-dir": str(tmp_path / "out"),
                          "run-name": "r"}, workers=0, node_config=cfgs)
    (refused,) = json.loads((d / "summary.json").read_text())["refused_nodes"]
    assert "<data-path>: 30 features per example" in refused["reason"] and "hidden-site" not in refused["reason"]
    assert not any("hidden-site" in f.read_text() for f in d.iterdir() if f.suffix in (".json", ".jsonl", ".log"))
    assert any("this SuperNode's data cannot be used" in m and str(bad) in m for m in caplog.messages)


def test_a_node_s_task_holds_only_its_own_data(tmp_path):
    """LocalTask (the node's side; run in the ClientApp's process): its client data are the node's training part
    whatever the partition id, its test data the held-out part, no server data, its size and fingerprint; every
    other attribute is the wrapped task's."""
    from zofl.tasks import SoftmaxTask
    from zofl.tasks.local import LocalTask

    data = read_node_data(NodeData.of({"data-path": str(site_file(tmp_path / "a.npz", 40, 1))}), 64, 10, seed=0)
    inner = SoftmaxTask()
    task = LocalTask(inner, data, 10)
    for pid in (0, 7):
        got = task.client_data(None, pid)
        assert got.x is data.x and got.y is data.y and got.num_classes == 10
    test = task.test_data(None)
    assert test.x is data.x_test and test.y is data.y_test and len(test.y) == 4 and test.num_classes == 10
    server = task.server_data(None)
    assert server.x.shape == (0, 64) and server.y.shape == (0,) and server.num_classes == 10
    assert task.num_train(None) == 36 and task.fingerprint(None) == (data.fingerprint, "this node's own data")
    assert task.check(None) is None and task.loss == inner.loss
