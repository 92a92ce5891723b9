"""tests/mutation_status.py reads mutmut's verdicts as mutmut means them, per package."""
from __future__ import annotations

import json

import pytest

from tests import mutation_status as ms


def _meta(root, source: str, codes: dict[str, int | None]) -> None:
    path = root / "mutants" / (source + ".meta")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": {}}))


def test_letters_counts_and_names(tmp_path, capsys):
    _meta(tmp_path, "zofl/methods/afbo.py", {
        "zofl.methods.afbo.xǁAFBOǁstep__mutmut_2": 0, "zofl.methods.afbo.xǁAFBOǁstep__mutmut_1": 1,
        "zofl.methods.afbo.xǁAFBOǁstep__mutmut_10": 36, "zofl.methods.afbo.x_client_work__mutmut_1": 33})
    _meta(tmp_path, "zofl/results.py", {"zofl.results.x_write__mutmut_1": None, "zofl.results.x_write__mutmut_2": 3,
                                        "zofl.results.x_write__mutmut_3": -11})
    status = ms.read_status(tmp_path)
    # numeric order of the mutants, not the names' order (10 after 2)
    assert status == {"zofl.methods.afbo.x_client_work": "n", "zofl.methods.afbo.xǁAFBOǁstep": "kst",
                      "zofl.results.x_write": "uk?"}
    assert ms.group_of("zofl.methods.afbo.x_client_work") == "methods"
    assert ms.group_of("zofl.results.x_write") == "zofl/*.py"
    assert ms.source_of("zofl.methods.afbo.xǁAFBOǁstep") == "zofl/methods/afbo.py"
    assert ms.source_of("zofl.methods.x_client_work") == "zofl/methods/__init__.py"
    assert ms.source_of("zofl.results.x_write") == "zofl/results.py"
    rows = ms.table(status, ms.group_of)
    assert rows[2] == "| methods | 4 | 4 | 1 + 1 | 0 | 0 | 0 | 1 | 1 | 0 | 0 | 50.0% |"
    assert rows[3] == "| zofl/*.py | 3 | 2 | 1 + 0 | 0 | 0 | 0 | 0 | 0 | 1 | 1 | 50.0% |"
    assert rows[4] == "| **all** | 7 | 6 | 2 + 1 | 0 | 0 | 0 | 1 | 1 | 1 | 1 | 50.0% |"
    # verdicts: the survivor harmless (out of the denominator), the no-tests mutant left; a verdict whose mutant's
    # diff changed since, or whose mutant is gone, lapses
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text(json.dumps({"verdicts": {
        "zofl.methods.afbo.xǁAFBOǁstep__mutmut_2": {"verdict": "harmless", "why": "", "diff": "-a\n+b"},
        "zofl.methods.afbo.x_client_work__mutmut_1": {"verdict": "left", "why": "", "diff": "-c\n+d"},
        "zofl.results.x_write__mutmut_1": {"verdict": "harmless", "why": "", "diff": "-e\n+f"},
        "zofl.results.x_write__mutmut_9": {"verdict": "harmless", "why": "", "diff": "-g\n+h"}}}))
    diffs = {"zofl.methods.afbo.xǁAFBOǁstep__mutmut_2": "-a\n+b", "zofl.methods.afbo.x_client_work__mutmut_1": "-c\n+d"}
    judged, stale = ms.apply_verdicts(tmp_path, status, verdicts, diff=lambda copy, name: diffs.get(name, "?"))
    assert judged["zofl.methods.afbo.xǁAFBOǁstep"] == "kht" and judged["zofl.methods.afbo.x_client_work"] == "l"
    assert stale == ["zofl.results.x_write__mutmut_9"]  # x_write's 1 is not checked: its verdict waits
    assert ms.table(judged, ms.group_of)[2] == "| methods | 4 | 4 | 1 + 1 | 0 | 1 | 1 | 0 | 0 | 0 | 0 | 66.7% |"
    ms.main([str(tmp_path), "--survivors", "zofl.methods.*"])
    assert capsys.readouterr().out.split() == ["zofl.methods.afbo.x_client_work__mutmut_1",
                                               "zofl.methods.afbo.xǁAFBOǁstep__mutmut_2"]
    out = tmp_path / "status.json"
    ms.main([str(tmp_path), "--json", str(out), "--commit", "abc"])
    assert json.loads(out.read_text())["status"] == status


def test_a_folder_without_mutants_is_named(tmp_path):
    with pytest.raises(SystemExit, match="mutants/zofl not found"):
        ms.read_status(tmp_path)


def test_the_mutation_run_deselects_exactly_the_tests_that_start_a_process():
    """[tool.mutmut] in pyproject.toml stays current: a test added that starts a process (and so can kill no
    mutant, and stops mutmut's runs when it fails in mutmut's copy) must be deselected there."""
    assert sorted(ms.selection("--deselect")) == ms.process_tests()
    assert "tests/test_cli.py::test_sigterm_of_zofl_run_stops_its_superlink_and_run_within_seconds" in \
        ms.process_tests()


def test_a_saved_run_restores_into_a_new_copy_only_where_a_function_is_the_same(tmp_path):
    """--json saves each mutant's letter and each function's hash; --restore writes the letters back into a new
    copy's generated mutants (null there) for the functions whose hash and mutant count are unchanged."""
    def meta(root, hashes, codes):
        path = root / "mutants" / "zofl" / "methods" / "__init__.py.meta"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": hashes,
                                    "durations_by_key": {}, "estimated_durations_by_key": {}}))
        return path

    old, new = tmp_path / "old", tmp_path / "new"
    meta(old, {"x_a": "h1", "x_b": "h2", "x_c": "h3"},
         {"zofl.methods.x_a__mutmut_1": 1, "zofl.methods.x_a__mutmut_2": 0, "zofl.methods.x_b__mutmut_1": 33,
          "zofl.methods.x_c__mutmut_1": 36})
    saved = tmp_path / "run.json"
    assert ms.main([str(old), "--json", str(saved), "--commit", "abc"]) == 0
    assert json.loads(saved.read_text())["hashes"] == {"zofl.methods.x_a": "h1", "zofl.methods.x_b": "h2",
                                                      "zofl.methods.x_c": "h3"}
    path = meta(new, {"x_a": "h1", "x_b": "CHANGED", "x_c": "h3"},  # x_b edited; x_c gained a mutant
                {"zofl.methods.x_a__mutmut_1": None, "zofl.methods.x_a__mutmut_2": None,
                 "zofl.methods.x_b__mutmut_1": None, "zofl.methods.x_c__mutmut_1": None,
                 "zofl.methods.x_c__mutmut_2": None})
    assert ms.restore(new, saved) == (2, 2)
    assert json.loads(path.read_text())["exit_code_by_key"] == {
        "zofl.methods.x_a__mutmut_1": 1, "zofl.methods.x_a__mutmut_2": 0, "zofl.methods.x_b__mutmut_1": None,
        "zofl.methods.x_c__mutmut_1": None, "zofl.methods.x_c__mutmut_2": None}
