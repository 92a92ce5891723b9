"""One set of numbers: every figure a page quotes with a marker is the one its study file holds
(experiments/doc_numbers.py), and every committed verdict is what its records give (experiments/afbo_verdict.py)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_every_quoted_figure_on_every_page_is_its_study_files():
    res = _script("experiments/doc_numbers.py")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "quoted figures, 0 differing" in res.stdout and not res.stdout.startswith("0 ")


def test_a_page_that_differs_from_its_study_is_found_and_rewritten(tmp_path):
    results = tmp_path / "docs" / "results" / "s"
    results.mkdir(parents=True)
    (results / "summary.json").write_text(json.dumps({"a.b": {"gap": [0.0123, 0.0045, 5]}}))
    page = tmp_path / "docs" / "p.md"
    page.write_text("gap <!--n s/summary.json#a.b/gap pts-->+1.00 +- 0.45<!--/n--> points, "
                    "<!--n s/summary.json#a.b/gap n-->5<!--/n--> seeds, "
                    "<!--n s/summary.json#a.b/none pts-->?<!--/n--> <!--n s/summary.json#a.b/gap! pts-->?<!--/n-->\n")
    res = _script("experiments/doc_numbers.py", "--root", tmp_path)
    assert res.returncode == 1
    assert "is '+1.23 +- 0.45', the page says '+1.00 +- 0.45'" in res.stdout and "no 'none'" in res.stdout
    assert "3 quoted figures, 3 differing" in res.stdout and "1 marker(s) that do not parse" in res.stdout
    _script("experiments/doc_numbers.py", "--root", tmp_path, "--write")
    assert "-->+1.23 +- 0.45<!--/n--> points" in page.read_text()
    assert "3 quoted figures, 2 differing" in _script("experiments/doc_numbers.py", "--root", tmp_path).stdout
    page.write_text("<!--n ../../../etc/passwd.json#x pts-->1<!--/n-->")
    res = _script("experiments/doc_numbers.py", "--root", tmp_path).stdout
    assert "not a JSON or CSV file under docs/results" in res
    # a results.csv cell (the one row whose columns hold the values), keys with '=', a gap's size without its sign
    (results / "results.csv").write_text("arm,seed,end_s\nwall,0,12.5\nwall,1,13.25\nsim,0,10\n")
    (results / "steps.json").write_text(json.dumps({"B=32/lr=0.1": {"gap": [-0.0078, 0.0021, 5]}}))
    page.write_text("<!--n s/results.csv#arm=wall,seed=1/end_s d2-->13.25<!--/n--> "
                    "<!--n s/steps.json#B=32/lr=0.1/gap mag-->0.78 +- 0.21<!--/n--> "
                    "<!--n s/results.csv#arm=wall/end_s d2-->?<!--/n-->")
    res = _script("experiments/doc_numbers.py", "--root", tmp_path).stdout
    assert "3 quoted figures, 1 differing" in res and "arm=wall/end_s: 2 rows match (need one" in res, res
    # a word (a curve's reading) as the file has it; a number quoted as a word is unreadable, not rendered
    (results / "c.json").write_text(json.dumps({"m": {"curve": "rising", "gain": [0.0018, 0.0007, 5]}}))
    page.write_text("<!--n s/c.json#m/curve str-->rising<!--/n--> <!--n s/c.json#m/gain str-->?<!--/n-->")
    res = _script("experiments/doc_numbers.py", "--root", tmp_path).stdout
    assert "2 quoted figures, 1 differing" in res and "is not a word" in res, res


def test_every_committed_verdict_is_what_its_records_give(tmp_path):
    """Each docs/results/**/verdict.json recomputed from its folder's runs.csv and rounds.parquet alone: a page
    quoting it quotes what the runs say. One process runs experiments/afbo_verdict.py's main on every folder (as
    `python experiments/afbo_verdict.py --from DIR ...` does; its imports, ~2 s, once instead of 19 times)."""
    found = sorted((ROOT / "docs" / "results").rglob("verdict.json"))
    assert found
    calls = []
    for i, v in enumerate(found):
        d = tmp_path / str(i)
        d.mkdir()
        for name in ("runs.csv", "rounds.parquet"):
            shutil.copy(v.parent / name, d / name)
        first = next(iter(json.loads(v.read_text()).values()))  # the targets the study was read with
        calls.append(["--from", str(d), "--no-figures", "--target", str(first["target_acc"]),
                      "--auc-target", str(first["target_auc"])])
    code = "import json, sys; import afbo_verdict; sys.exit(max(afbo_verdict.main(a) for a in json.loads(sys.argv[1])))"
    res = _script("-c", code, json.dumps(calls), cwd=ROOT / "experiments")  # as the docs run it: siblings import
    assert res.returncode == 0, res.stderr
    for i, v in enumerate(found):
        assert json.loads((tmp_path / str(i) / "verdict.json").read_text()) == json.loads(v.read_text()), v


def test_every_committed_ceiling_is_what_its_records_and_the_verdicts_give(tmp_path):
    """Each docs/results/**/ceiling.json recomputed from its folder's runs.csv and rounds.parquet (and its clean/
    control's, where present) and the committed verdict folders (experiments/afbo_ceiling.py --from)."""
    found = sorted((ROOT / "docs" / "results").rglob("ceiling.json"))
    assert found
    for i, c in enumerate(found):
        d = tmp_path / str(i)
        for sub in ("", "clean"):
            if (c.parent / sub / "rounds.parquet").exists():
                (d / sub).mkdir(parents=True, exist_ok=True)
                for name in ("runs.csv", "rounds.parquet"):
                    shutil.copy(c.parent / sub / name, d / sub / name)
        res = _script("experiments/afbo_ceiling.py", "--from", d, "--no-figures")
        assert res.returncode == 0, res.stderr
        assert json.loads((d / "ceiling.json").read_text()) == json.loads(c.read_text()), c
