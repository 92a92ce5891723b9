"""The core is Flower-free: no module under zofl/algorithms, zofl/core or zofl/methods imports
flwr, directly or through what it imports."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "zofl"
FLOWER_FREE = ("algorithms", "core", "methods")


def test_no_flower_import_in_the_core_modules():
    offenders = []
    for pkg in FLOWER_FREE:
        for path in sorted((ROOT / pkg).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("flwr",)]
    assert not offenders, offenders


def test_importing_the_core_loads_no_flower_module():
    mods = ", ".join(f"zofl.{p}" for p in FLOWER_FREE) + ", zofl.core.rounds, zofl.core.asynchronous"
    code = f"import sys, {mods}; print(sorted(m for m in sys.modules if m == 'flwr' or m.startswith('flwr.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
