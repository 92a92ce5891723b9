"""tests/planted_bugs.py (the planted-bug regression list, run on demand) stays current: every entry's original
text is in its file exactly once and every test it names exists, so that running it plants what it says."""
from pathlib import Path

from . import planted_bugs

REPO = Path(__file__).resolve().parent.parent


def test_every_planted_bug_still_finds_its_line_and_names_existing_tests():
    assert len(planted_bugs.BUGS) >= 12 and len({b.name for b in planted_bugs.BUGS}) == len(planted_bugs.BUGS)
    for bug in planted_bugs.BUGS:
        assert planted_bugs.stale(REPO, bug) is None, bug.name
        assert bug.replacement != bug.original, bug.name
        for t in bug.tests:
            path, _, name = t.partition("::")
            assert (REPO / path).is_file(), (bug.name, t)
            assert not name or f"def {name.split('[')[0]}(" in (REPO / path).read_text(), (bug.name, t)
