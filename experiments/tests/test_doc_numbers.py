"""One set of numbers: every figure a page quotes with a marker is the one its study file holds
(experiments/doc_numbers.py)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import doc_numbers  # noqa: E402


def test_every_quoted_figure_on_every_page_is_its_study_files():
    seen, problems = doc_numbers.check(doc_numbers.pages())
    assert seen > 0 and problems == []


def test_a_page_that_differs_from_its_study_is_found_and_rewritten(tmp_path, monkeypatch):
    results = tmp_path / "docs" / "results" / "s"
    results.mkdir(parents=True)
    (results / "summary.json").write_text(json.dumps({"a.b": {"gap": [0.0123, 0.0045, 5], "n": 3.0}}))
    page = tmp_path / "docs" / "p.md"
    page.write_text("gap <!--n s/summary.json#a.b/gap pts-->+1.00 +- 0.45<!--/n--> points, "
                    "<!--n s/summary.json#a.b/gap n-->5<!--/n--> seeds, "
                    "<!--n s/summary.json#a.b/none pts-->?<!--/n-->\n")
    monkeypatch.setattr(doc_numbers, "ROOT", tmp_path)
    monkeypatch.setattr(doc_numbers, "RESULTS", tmp_path / "docs" / "results")
    seen, problems = doc_numbers.check([page])
    assert seen == 3 and len(problems) == 2
    assert "is '+1.23 +- 0.45', the page says '+1.00 +- 0.45'" in problems[0] and "no 'none'" in problems[1]
    doc_numbers.check([page], write=True)
    assert "-->+1.23 +- 0.45<!--/n--> points" in page.read_text()
    assert doc_numbers.check([page])[1] == [problems[1]]
    page.write_text("<!--n ../../etc/passwd.json#x pts-->1<!--/n-->")
    assert "not a JSON file under docs/results" in doc_numbers.check([page])[1][0]


def test_the_script_checks_every_page_from_a_shell():
    res = subprocess.run([sys.executable, "experiments/doc_numbers.py"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "quoted figures, 0" in res.stdout


def test_every_committed_verdict_is_what_its_records_give(tmp_path):
    """Each docs/results/**/verdict.json (experiments/afbo_verdict.py) recomputed from its folder's runs.csv and
    rounds.parquet alone: a page quoting it quotes what the runs say."""
    import shutil

    import afbo_verdict

    found = sorted((ROOT / "docs" / "results").rglob("verdict.json"))
    assert found
    for i, v in enumerate(found):
        d = tmp_path / str(i)
        d.mkdir()
        for name in ("runs.csv", "rounds.parquet"):
            shutil.copy(v.parent / name, d / name)
        first = next(iter(json.loads(v.read_text()).values()))  # the targets the study was read with
        afbo_verdict.report(d, first["target_acc"], first["target_auc"], 0.5, figures=False)
        assert json.loads((d / "verdict.json").read_text()) == json.loads(v.read_text()), v
