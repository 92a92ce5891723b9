"""experiments/ as a folder of its own: its scripts import zofl as the installed package and each other as
modules beside them (no edits of the import path), and no function there is longer than 80 lines."""
import ast
import subprocess
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1]
SOURCES = sorted(EXPERIMENTS.rglob("*.py"))
MAX_LINES = 80


def test_no_import_path_edits():
    edit = "sys." + "path"  # spelled apart, so that this file does not name it
    assert [str(p.relative_to(EXPERIMENTS)) for p in SOURCES if edit in p.read_text()] == []


def test_no_function_over_80_lines():
    long = [f"{p.relative_to(EXPERIMENTS)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in SOURCES for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_LINES]
    assert long == []


def test_every_script_imports_as_the_docs_run_it():
    """`python experiments/NAME.py` puts experiments/ first on the import path; so does running from that folder.
    Every script (and the shared module) imports there, in one interpreter."""
    names = sorted(p.stem for p in EXPERIMENTS.glob("*.py"))
    res = subprocess.run([sys.executable, "-c", f"import {', '.join(names)}"], cwd=EXPERIMENTS, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
