"""Why each frozen reference file is what it is: tests/reference/ledger.json.

The frozen figures (rounds.json, async_rounds.json) are a second line of defence behind the behavioural tests:
regenerating them after a wrong change would accept the change. So they cannot be regenerated silently: every
write by freeze.py / freeze_async.py needs ``--reason`` (what changed in the numbers and why that is right) and
appends an entry with the new files' SHA-256 here; tests/test_reference_ledger.py fails when a reference file's
bytes are not those of the last entry naming it (an edit by hand, or a regeneration without a reason). The commit
that changes a reference file says the same reason.
"""
from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEDGER = HERE / "ledger.json"
FILES = ("rounds.json", "async_rounds.json")


def digest(name: str) -> str:
    return hashlib.sha256((HERE / name).read_bytes()).hexdigest()


def entries() -> list[dict]:
    return json.loads(LEDGER.read_text()) if LEDGER.exists() else []


def recorded(name: str) -> str | None:
    """The SHA-256 the last entry naming ``name`` gives it (None: no entry)."""
    return next((e["sha256"][name] for e in reversed(entries()) if name in e["sha256"]), None)


def record(name: str, reason: str) -> None:
    """Append an entry for ``name`` as it is now, with ``reason`` (refused if empty)."""
    if not reason.strip():
        raise SystemExit("a frozen reference is rewritten only with --reason 'what changed and why it is right'")
    log = entries() + [{"date": datetime.date.today().isoformat(), "sha256": {name: digest(name)},
                        "reason": reason.strip()}]
    LEDGER.write_text(json.dumps(log, indent=1) + "\n")
