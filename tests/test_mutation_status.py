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
    assert rows[2] == "| methods | 4 | 4 | 1 + 1 | 1 | 1 | 0 | 0 | 50.0% |"
    assert rows[3] == "| zofl/*.py | 3 | 2 | 1 + 0 | 0 | 0 | 1 | 1 | 50.0% |"
    assert rows[4] == "| **all** | 7 | 6 | 2 + 1 | 1 | 1 | 1 | 1 | 50.0% |"
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
