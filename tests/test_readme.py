"""README.md's two commands stay true: CI runs the test command, the run command uses the App."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands():
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_ci_runs_the_readme_test_command():
    test_cmd = next(c for c in _commands() if "pytest" in c)
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_readme_run_command_is_short_and_flowers_own_is_documented():
    commands = _commands()
    assert commands[0].strip().endswith("pip install -e . && zofl run") and len(commands[0]) < 120
    flwr = next(c for c in commands if "flwr run . --stream" in c)
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in flwr
    scripts = (ROOT / "pyproject.toml").read_text()
    assert 'zofl = "zofl.cli:entry"' in scripts  # the console command the README's first line calls


def test_fab_holds_the_package_only(tmp_path):
    """`flwr run` ships a FAB of at most 10 MB: docs/results must stay out of it."""
    import os
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    flwr = Path(sys.executable).parent / "flwr"
    app = tmp_path / "app"
    # the checkout without docs/results (hundreds of MB of run records: what the FAB must leave out anyway)
    shutil.copytree(ROOT, app, ignore=shutil.ignore_patterns(".venv", ".git", ".superlink-*", "__pycache__", "results"))
    subprocess.run([str(flwr), "build", "--app", str(app)], cwd=tmp_path, check=True, capture_output=True,
                   env={**os.environ, "FLWR_HOME": str(tmp_path / "home")})
    fab = next(tmp_path.glob("*.fab"))
    names = zipfile.ZipFile(fab).namelist()
    assert fab.stat().st_size < 1_000_000 and "zofl/methods/zohfl.py" in names and "zofl/core/protocol.py" in names
    assert not any(n.startswith(("docs/", "tests/", "experiments/")) for n in names)
