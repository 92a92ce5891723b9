"""experiments/run_all.sh, the script that regenerates docs/results: it must not fall behind the grids."""
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository
SCRIPT = ROOT / "experiments" / "run_all.sh"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[int, str, str, str]:
    """(exit code, stdout, stderr, data dir) of the script's dry run: every command it would run, expanded."""
    data = tmp_path_factory.mktemp("run_all") / "data"
    res = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(data)], capture_output=True, text=True)
    return res.returncode, res.stdout, res.stderr, str(data)


def _script_grids(commands: str) -> tuple[set[str], set[str]]:
    """(grids the dry run's commands name, grids the script's comments list as "superseded: experiments/X.toml")."""
    superseded = set()
    for line in SCRIPT.read_text().splitlines():
        m = re.match(r"#\s+superseded:\s+experiments/([\w.-]+\.toml)\b", line.strip())
        if m:
            superseded.add(m.group(1))
    return set(re.findall(r"experiments/([\w.-]+\.toml)\b", commands)), superseded


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_run_all_names_every_grid(dry_run):
    run, superseded = _script_grids(dry_run[1])
    grids = {p.name for p in (ROOT / "experiments").glob("*.toml")}
    assert grids - run - superseded == set(), \
        "grids neither run by experiments/run_all.sh nor listed there as superseded"
    assert run & superseded == set(), "grids both run and listed as superseded"
    assert (run | superseded) - grids == set(), "run_all.sh names grids that do not exist"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_run_all_covers_every_result_folder(dry_run):
    text = SCRIPT.read_text() + dry_run[1]  # the commands as run, and the folders listed as not regenerated
    results = ROOT / "docs" / "results"
    folders = [p for p in results.iterdir() if p.is_dir()] + \
        [p for p in (results / "afbo").iterdir() if p.is_dir()]
    unnamed = [str(p.relative_to(ROOT)) for p in folders
               if not re.search(re.escape(str(p.relative_to(ROOT))) + r"(?![\w-])", text)]
    assert unnamed == [], "result folders run_all.sh neither makes nor lists as not regenerated"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_run_all_dry_run(dry_run):
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    returncode, out, err, data = dry_run
    assert returncode == 0, err
    assert "missing" not in err
    assert f"data-dir=\\\"{data}\\\"" in out  # printed with %q
    # the one-seed grid runs before the seeded one that shares its folder (and rewrites its tables)
    assert out.index("experiments/table1.toml") < out.index("experiments/table1_seeds.toml")
    assert "cp -r" not in SCRIPT.read_text()


# committed pages that run_all.sh writes from committed results only (`to PAGE python experiments/...`) and that no
# other test regenerates; docs/results/table1_summary.md is also the one-screen table of docs/results/README.md
PAGES = ("docs/results/table1_summary.md", "docs/results/table1_tuned_small.md",
         "docs/results/table1_tuning_small/picks.md", "docs/results/study/seeds.md",
         "docs/results/fig1_fedrzo_controls/against.md", "docs/results/table1_speed.md",
         "docs/results/fedrzo_compare_tuning/picks.md", "docs/results/fedrzo_compare/compare.md",
         "docs/results/fig2_fedrzo_hyper_cifar_tuning/picks.md", "docs/results/table1_speed_summary.md",
         "docs/results/fedrzo_compare/summary.md")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_committed_pages_are_what_run_all_s_commands_print(dry_run):
    """Each page is what its command in the dry run (as printed: bash quoting) prints from the committed results,
    byte for byte; the commands run at once."""
    procs = {}
    for page in PAGES:
        line = next(cmd for cmd in dry_run[1].splitlines() if cmd.endswith(f" > {page}"))
        argv = shlex.split(line[2:-len(f" > {page}")])
        assert argv[0] == "python" and argv[1].startswith("experiments/") and "--toml" not in argv
        procs[page] = subprocess.Popen([sys.executable, *argv[1:]], cwd=ROOT, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    for page, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert out == (ROOT / page).read_text(), page
    summary = (ROOT / "docs" / "results" / "table1_summary.md").read_text()
    assert summary.strip() in (ROOT / "docs" / "results" / "README.md").read_text()


def test_afbo_share_splits_the_committed_gaps():
    """experiments/afbo_share.py on the committed regularization summary: the table it prints is the
    committed share.md, and its straggler rows split AFBO - FedNest into the controls' gap and the bilevel
    part (the numbers docs/afbo.md quotes)."""
    script = ROOT / "experiments" / "afbo_share.py"
    summary = ROOT / "docs" / "results" / "afbo" / "regularization" / "summary.json"
    out = subprocess.run([sys.executable, str(script), str(summary.relative_to(ROOT))], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out == (summary.parent / "share.md").read_text()
    assert "| -0.051 +- 0.021 (n=3) | -0.043 +- 0.020 (n=3) | -0.008 +- 0.001 (n=3) | 85% |" in out
