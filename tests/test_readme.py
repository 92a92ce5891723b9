"""README.md's two commands stay true: CI runs the test command, the run command uses the App."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands():
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_ci_runs_the_readme_test_command():
    test_cmd = next(c for c in _commands() if "pytest" in c)
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_readme_run_command_disables_runtime_installs():
    run_cmd = _commands()[0]
    assert "pip install -e ." in run_cmd and "flwr run . --stream" in run_cmd
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in run_cmd
