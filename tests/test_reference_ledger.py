"""The frozen reference figures cannot change silently (issue 52): every reference file's bytes are those its last
entry in tests/reference/ledger.json records, with the reason for that version; the freeze scripts refuse to write
without a reason and record one when they do."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .reference import ledger

REF = Path(__file__).parent / "reference"


@pytest.mark.parametrize("name", ledger.FILES)
def test_every_reference_file_is_its_last_recorded_version(name):
    got = hashlib.sha256((REF / name).read_bytes()).hexdigest()
    assert got == ledger.recorded(name), (
        f"tests/reference/{name} changed without a reason recorded: regenerate it with its freeze script and "
        f"--reason 'what changed and why it is right' (appended to tests/reference/ledger.json), and say the same in "
        f"the commit")
    assert all(e["reason"].strip() and e["date"] for e in ledger.entries())


@pytest.mark.parametrize("script", ["freeze.py", "freeze_async.py"])
def test_the_freeze_scripts_refuse_to_write_without_a_reason(script):
    before = {n: (REF / n).read_bytes() for n in ledger.FILES}
    res = subprocess.run([sys.executable, str(REF / script), "--force"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "--reason" in res.stderr
    assert {n: (REF / n).read_bytes() for n in ledger.FILES} == before


def test_a_recorded_regeneration_is_accepted_and_an_unrecorded_edit_is_not(tmp_path, monkeypatch):
    (tmp_path / "rounds.json").write_text("{}\n")
    monkeypatch.setattr(ledger, "HERE", tmp_path)
    monkeypatch.setattr(ledger, "LEDGER", tmp_path / "ledger.json")
    with pytest.raises(SystemExit, match="--reason"):
        ledger.record("rounds.json", "  ")
    ledger.record("rounds.json", "a new run added")
    assert ledger.recorded("rounds.json") == hashlib.sha256(b"{}\n").hexdigest()
    (tmp_path / "rounds.json").write_text('{"edited": 1}\n')
    assert ledger.recorded("rounds.json") != hashlib.sha256((tmp_path / "rounds.json").read_bytes()).hexdigest()
    assert json.loads((tmp_path / "ledger.json").read_text())[-1]["reason"] == "a new run added"
