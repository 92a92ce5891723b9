"""A study's records packed into rounds.parquet (zofl.packed): read back exactly, read where the
run folders were read, and the published figures recomputed from the committed packed files."""
import csv
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from zofl.packed import PACKED, read_packed
from zofl.results import read_rounds
from zofl.stats import run_figures
from zofl.study import main, pack, study_runs

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"

# records as rounds.jsonl holds them, with what a careless packing would lose: a field absent in one
# record and null in another, ints beside floats in one column, bools, lists, objects, NaN, strings
CELLS = {
    "a-1": ({"strategy": "zohfl", "seed": 0, "alpha": 1.0, "tau": 20.0},
            [{"round": 0, "test_acc": 0.5, "test_loss": 1, "sampled": [], "f2_est": None},
             {"round": 1, "test_acc": 0.625, "test_loss": 0.75, "sampled": [3, 1], "f2_est": 2.5, "H": 20,
              "level": "upper", "extra": {"k": [1, 2.0], "b": True}},
             {"round": 2, "test_acc": float("nan"), "test_loss": 2, "sampled": [0], "H": 0, "flag": False}]),
    "b-2": ({"strategy": "fedavg", "seed": 1, "alpha": 0.1, "local-lr": 0.05},
            [{"round": 0, "test_acc": 0.25, "test_loss": 3.0, "sampled": [], "mixed": [1, "x", None]},
             {"round": 1, "test_acc": 0.5, "test_loss": 2.0, "sampled": [2], "f2_est": None, "mixed": 7}]),
}


def _study(tmp_path: Path) -> Path:
    for cell, (cfg, recs) in CELLS.items():
        d = tmp_path / "study" / "cells" / cell
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "summary.json").write_text(json.dumps({"status": "finished"}))
        (d / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "study" / "rounds.csv").write_text("derived\n")
    return tmp_path / "study"


def _exact(a, b) -> bool:
    """Same JSON text, and the same Python types all the way down (1 is not 1.0)."""
    def types(x):
        if isinstance(x, dict):
            return {k: types(v) for k, v in x.items()}
        if isinstance(x, list):
            return [types(v) for v in x]
        return type(x).__name__
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and types(a) == types(b)


def test_records_read_back_exactly_after_the_run_folders_lose_them(tmp_path, capsys):
    study = _study(tmp_path)
    main([str(study), "--remove"])
    assert "2 cells, 5 records" in capsys.readouterr().out
    assert not list(study.rglob("rounds.jsonl")) and not (study / "rounds.csv").exists()
    for cell, (cfg, recs) in CELLS.items():
        got = read_rounds(study / "cells" / cell)  # where every reader reads a run's records
        assert _exact(got, recs), cell
        assert "f2_est" not in got[0] if "f2_est" not in recs[0] else got[0]["f2_est"] is None
    assert math.isnan(read_rounds(study / "cells" / "a-1")[2]["test_acc"])
    assert _exact(read_packed(study / PACKED)["b-2"][0], CELLS["b-2"][0])  # the config beside the records
    # packing again (nothing left in the folders) keeps every record: from the packed file itself
    assert pack(study) == (2, 5)
    assert _exact(read_rounds(study / "cells" / "a-1"), CELLS["a-1"][1])
    assert [c for c, _, _ in study_runs(study)] == ["a-1", "b-2"]


def test_one_line_opens_it_for_a_data_scientist(tmp_path):
    study = _study(tmp_path)
    pack(study, remove_csv=True)
    assert (study / "cells" / "a-1" / "rounds.jsonl").exists() and not (study / "rounds.csv").exists()
    df = pd.read_parquet(study / PACKED)
    assert len(df) == 5 and list(df.loc[df.cell == "a-1", "round"]) == [0, 1, 2]
    assert set(df.loc[df.cell == "b-2", "strategy"]) == {"fedavg"}  # each record beside its run's config
    assert df["test_loss"].dtype == "float64"


def test_a_resume_never_reads_the_packed_file(tmp_path):
    study = _study(tmp_path)
    pack(study, remove=True)
    with pytest.raises(FileNotFoundError):
        read_rounds(study / "cells" / "a-1", check_order=True)
    with pytest.raises(FileNotFoundError):
        read_rounds(study / "cells" / "no-such-cell")


def test_cells_still_running_are_packed_as_far_as_they_go_and_keep_their_records(tmp_path):
    """The runner packs after every cell while others run: a cell that has just started (no record
    yet) is left out, one half done is packed but keeps its rounds.jsonl (no summary.json)."""
    study = _study(tmp_path)
    for name, lines in (("c-new", ""), ("d-half", '{"round": 0, "test_acc": 0.1}\n')):
        d = study / "cells" / name
        d.mkdir()
        (d / "config.json").write_text("{}")
        (d / "rounds.jsonl").write_text(lines)
    assert pack(study, remove=True) == (3, 6)
    assert set(read_packed(study / PACKED)) == {"a-1", "b-2", "d-half"}
    assert (study / "cells" / "d-half" / "rounds.jsonl").exists()
    assert not (study / "cells" / "a-1" / "rounds.jsonl").exists()


def test_a_corrupt_packed_file_is_named_not_a_traceback(tmp_path):
    study = _study(tmp_path)
    pack(study, remove=True)
    (study / PACKED).write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match="rounds.parquet: not a study's packed records"):
        read_rounds(study / "cells" / "a-1")
    from zofl.plot import plot_runs
    with pytest.raises(ValueError, match="rounds.parquet: not a study's packed records"):  # zofl plot: exit 2
        plot_runs([study / "cells" / "a-1"], tmp_path / "p.png")


def test_not_a_study_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no cell with records"):
        pack(tmp_path)


PUBLISHED = ["table1", "table1_zeros", "poisoning", "zohfl_variants", "fig1_fedrzo", "table1_tuned_cifar"]


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_figures_recomputed_from_the_packed_records(name):
    """results.csv's accuracies (x_0's, final, best, mean of the last 10% of rounds) of a committed
    study, recomputed from its rounds.parquet alone (pandas, not zofl's reader)."""
    study = RESULTS / name
    df = pd.read_parquet(study / PACKED, columns=["cell", "round", "test_acc"])
    acc = {cell: list(g.sort_values("round")["test_acc"]) for cell, g in df.groupby("cell")}
    rows = list(csv.DictReader(open(study / "results.csv")))
    assert rows
    for row in rows:
        fig = run_figures(acc[row["cell"]])
        assert float(row["x0_test_acc"]) == acc[row["cell"]][0]
        assert float(row["final_test_acc"]) == fig["final"] and float(row["best_test_acc"]) == fig["best"]
        assert float(row["last10_test_acc"]) == pytest.approx(fig["last10"], rel=1e-12, abs=0)
        assert int(row["rounds"]) == len(acc[row["cell"]]) - 1


def test_a_record_field_named_as_a_config_key_packs_and_reads_back(tmp_path):
    """AFBO's records have ``tau`` (its outer delays) and every config.json the run-config key ``tau``: the packing
    of every AFBO study failed on it (`zofl compare`'s reports ended in a traceback). The config's column is
    renamed in the file, and both read back as they were."""
    from zofl.packed import write_packed

    cfg = {"strategy": "afbo", "tau": 20.0, "seed": 3}
    recs = [{"round": 0, "tau": [0, 0], "config.tau": "a field of its own"}, {"round": 1, "tau": [1, 2]}]
    path = tmp_path / PACKED
    write_packed(path, [("c", cfg, recs), ("d", {"strategy": "fednest", "tau": 5.0}, [{"round": 0}])])
    got = read_packed(path)
    assert _exact(got["c"][0], cfg) and _exact(got["c"][1], recs)
    assert _exact(got["d"][0], {"strategy": "fednest", "tau": 5.0}) and _exact(got["d"][1], [{"round": 0}])
    columns = pd.read_parquet(path).columns
    assert {"tau", "config.tau", "config.config.tau"} <= set(columns)
    with pytest.raises(ValueError, match=r"record fields \['cell'\] clash with packed columns"):
        write_packed(path, [("c", cfg, [{"cell": 1}])])
    assert _exact(read_packed(path)["c"][1], recs)  # a refused packing leaves the file as it was


def test_a_report_script_s_table_is_written_as_a_study_s_file_and_read_back(tmp_path):
    """write_table / read_table (the AFBO studies' rounds.parquet, written by their report scripts): the rows back
    in order with their types, None where missing; the same rows give the same bytes; no temporary file left."""
    from zofl.packed import read_table, write_table

    cols = ["run", "t", "acc", "seed"]
    rows = [["a", 0.5, 0.875, 3], ["a", 1.0, None, 3], ["b", 0.25, 0.5, None]]
    path = write_table(tmp_path / "r.parquet", cols, rows)
    assert path == tmp_path / "r.parquet"
    back = read_table(path)
    assert back == [dict(zip(cols, r)) for r in rows]
    assert [type(r["seed"]) for r in back[:2]] == [int, int] and type(back[0]["acc"]) is float
    first = path.read_bytes()
    write_table(tmp_path / "r.parquet", cols, rows)
    assert path.read_bytes() == first and sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]
    assert list(pd.read_parquet(path).columns) == cols


def test_the_pack_command_says_what_it_does_keeps_the_records_with_remove_csv_and_refuses_in_one_line(tmp_path,
                                                                                                    capsys):
    """``python -m zofl.study``: its --help names the command and each option's effect; --remove-csv deletes the
    study's rounds.csv only (the cells keep their rounds.jsonl) and reports the bytes it read; a folder that is not a
    study ends with exit status 2 and one line naming it."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0 and help_text.startswith("usage: python -m zofl.study [-h] [--remove] [--remove-csv]")
    for text in ("A study (a ``zofl compare`` results folder", "a zofl compare results folder (holds cells/)",
                 "after checking the packed file, delete the cells' rounds.jsonl and the study's rounds.csv",
                 "after checking the packed file, delete the study's rounds.csv only"):
        assert text in help_text, text
    study = _study(tmp_path)
    (study / "rounds.csv").write_text("derived\n" * 40_000)  # 0.32 MB: the report's figure is this file's and the jsonl
    (study / "fig.png").write_bytes(b"\0" * 300_000)  # a study's other files (figures, tables) are not counted
    size = sum(f.stat().st_size for f in study.rglob("*") if f.name in ("rounds.jsonl", "rounds.csv"))
    main([str(study), "--remove-csv"])
    packed = (study / PACKED).stat().st_size
    assert capsys.readouterr().out.strip() == (f"{study / PACKED}: 2 cells, 5 records, {packed / 1e6:.1f} MB "
                                               f"(rounds.jsonl + rounds.csv: {size / 1e6:.1f} MB)")
    assert not (study / "rounds.csv").exists() and len(list(study.rglob("rounds.jsonl"))) == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "empty")])
    err = capsys.readouterr().err
    empty = tmp_path / "empty"
    assert e.value.code == 2 and err == (f"python -m zofl.study: error: {empty}: no cell with records under "
                                         f"{empty / 'cells'} (not a study)\n")
    main([str(study), "--remove"])
    assert capsys.readouterr().out.strip().endswith("MB, removed)")


def test_a_study_s_runs_are_its_finished_cells_only(tmp_path):
    """``study_runs``: the cells with summary.json and config.json whose status is not "failed", in name order,
    past any cell that is running, failed or incomplete; no cells folder, no runs."""
    study = _study(tmp_path)
    for name, files in (("a-0-running", {"config.json": {}}), ("a-0-failed", {"config.json": {},
                        "summary.json": {"status": "failed"}}), ("a-0-noconfig", {"summary.json": {}})):
        (study / "cells" / name).mkdir()
        for f, v in files.items():
            (study / "cells" / name / f).write_text(json.dumps(v))
    assert [c for c, _, _ in study_runs(study)] == ["a-1", "b-2"]
    assert study_runs(tmp_path / "nothing") == []


def test_a_packed_cell_s_records_are_found_only_for_a_cells_folder_of_a_packed_study(tmp_path):
    """packed_records: a cell's records from STUDY/rounds.parquet for STUDY/cells/<id>; None for a folder of the
    same name elsewhere beside the packed file (not a cell), and for a study that packs nothing."""
    from zofl.packed import packed_records, write_packed

    cfg, recs = CELLS["b-2"]
    (tmp_path / "study").mkdir()
    write_packed(tmp_path / "study" / PACKED, [("b-2", cfg, recs)])
    assert _exact(packed_records(tmp_path / "study" / "cells" / "b-2"), recs)
    assert packed_records(tmp_path / "study" / "runs" / "b-2") is None
    assert packed_records(tmp_path / "study" / "cells" / "a-1") is None
    (tmp_path / "other" / "cells").mkdir(parents=True)
    assert packed_records(tmp_path / "other" / "cells" / "b-2") is None


def test_the_study_command_s_help_names_the_tool_and_each_argument(capsys, monkeypatch):
    """`python -m zofl.study --help`: the module docstring's first paragraph, and what each argument does."""
    import zofl.study

    monkeypatch.setenv("COLUMNS", "400")  # one line per argument: argparse wraps at the terminal's width
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    first = " ".join(zofl.study.__doc__.split("\n\n")[0].split())
    assert e.value.code == 0 and first in " ".join(out.split()) and "packs each study" not in out
    for arg, text in (("study", "a zofl compare results folder (holds cells/)"),
                      ("--remove", "after checking the packed file, delete the cells' rounds.jsonl and the study's "
                                   "rounds.csv"),
                      ("--remove-csv", "after checking the packed file, delete the study's rounds.csv only")):
        assert re.search(rf"^ +{arg} +{re.escape(text)}$", out, re.M), (arg, out)
