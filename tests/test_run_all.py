"""experiments/run_all.sh, the script that regenerates docs/results: it must not fall behind the grids."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "run_all.sh"


def _script_grids() -> tuple[set[str], set[str]]:
    """(grids a command of run_all.sh names, grids its comments list as "superseded: experiments/X.toml")."""
    run, superseded = set(), set()
    for line in SCRIPT.read_text().splitlines():
        s = line.strip()
        if s.startswith("#"):
            m = re.match(r"#\s+superseded:\s+experiments/([\w.-]+\.toml)\b", s)
            if m:
                superseded.add(m.group(1))
        else:
            run.update(re.findall(r"experiments/([\w.-]+\.toml)\b", s))
    return run, superseded


def test_run_all_names_every_grid():
    run, superseded = _script_grids()
    grids = {p.name for p in (ROOT / "experiments").glob("*.toml")}
    assert grids - run - superseded == set(), \
        "grids neither run by experiments/run_all.sh nor listed there as superseded"
    assert run & superseded == set(), "grids both run and listed as superseded"
    assert (run | superseded) - grids == set(), "run_all.sh names grids that do not exist"


def test_run_all_covers_every_result_folder():
    text = SCRIPT.read_text()
    results = ROOT / "docs" / "results"
    folders = [p for p in results.iterdir() if p.is_dir()] + \
        [p for p in (results / "afbo").iterdir() if p.is_dir()]
    unnamed = [str(p.relative_to(ROOT)) for p in folders
               if not re.search(re.escape(str(p.relative_to(ROOT))) + r"(?![\w-])", text)]
    assert unnamed == [], "result folders run_all.sh neither makes nor lists as not regenerated"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_run_all_dry_run(tmp_path):
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    res = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(tmp_path / "data")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "missing" not in res.stderr
    out = res.stdout
    assert f"data-dir=\\\"{tmp_path / 'data'}\\\"" in out  # printed with %q
    # the one-seed grid runs before the seeded one that shares its folder (and rewrites its tables)
    assert out.index("experiments/table1.toml") < out.index("experiments/table1_seeds.toml")
    assert "cp -r" not in SCRIPT.read_text()
