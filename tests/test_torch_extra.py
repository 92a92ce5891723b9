"""torch is an optional extra: the default job runs without it, and a torch task or a torchvision download
asked for without it stops before any work with one line naming the extra. torch is hidden from a fresh
interpreter here (a finder first on sys.meta_path makes every import of it fail, as on a light install; the
real light install is measured in the README's figures)."""
import subprocess
import sys
import textwrap

import pytest

HIDE = textwrap.dedent("""
    import importlib.abc, importlib.machinery, sys
    class Absent(importlib.abc.Loader):  # found (other libraries only probe for it), but never importable
        def create_module(self, spec):
            raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)
        def exec_module(self, module):
            pass
    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] in ("torch", "torchvision"):
                return importlib.machinery.ModuleSpec(name, Absent())
    sys.meta_path.insert(0, Hide())
""")


def _python(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDE + textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)


def test_the_default_job_runs_without_torch_and_never_imports_it(tmp_path):
    res = _python(f"""
        from zofl.inprocess import run_inprocess
        run_inprocess({{"num-rounds": 2, "output-dir": "{tmp_path}", "run-name": "light"}}, workers=0)
        assert "torch" not in sys.modules, "something imported torch"
        print("ok")
    """, tmp_path)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]


def test_a_torch_task_without_torch_names_the_extra(tmp_path):
    res = _python("""
        from zofl.config import ConfigError
        from zofl.setup import prepare
        try:
            prepare({"task": "cnn", "strategy": "fedavg"})
        except ConfigError as exc:
            print(exc)
    """, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == ("run-config key 'task': task CNNTask (a torch task) needs torch, which is not "
                                  "installed: pip install -e '.[torch]' in the project's folder (or pip install "
                                  "'zofl[torch]')")


def test_a_download_without_torchvision_names_the_extra_and_the_offline_way(tmp_path):
    res = _python(f"""
        from zofl.tasks.data import DataError, download_npz
        try:
            download_npz("mnist", "{tmp_path}")
        except DataError as exc:
            print(exc)
    """, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "downloading 'mnist' needs torchvision" in res.stdout and ".[torch,download]" in res.stdout
    assert "zofl data get mnist --from FOLDER" in res.stdout


def test_a_users_clientapp_without_torch_names_the_extra(tmp_path):
    """zofl.client.train (a user's ClientApp) without torch: one line naming what needs it and the extra."""
    res = _python("""
        import numpy as np
        from zofl.client import gather
        from zofl.extras import MissingExtra
        try:
            gather((np.zeros((2, 1)), np.zeros(2, np.int64)), ("img", "label"))
        except MissingExtra as exc:
            print(exc)
    """, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == ("zofl.client.train needs torch, which is not installed: pip install -e '.[torch]' "
                                  "in the project's folder (or pip install 'zofl[torch]')")


def test_require_names_what_needs_the_module_and_the_extra_in_one_line(monkeypatch):
    """``extras.require`` in this process: a module that is not installed, and one installed but broken (its error's
    first 200 characters, whitespace folded into one line)."""
    import importlib

    from zofl.extras import MissingExtra, require

    def missing(name):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(MissingExtra) as exc:
        require("torchvision", "downloading 'mnist'")
    assert str(exc.value) == ("downloading 'mnist' needs torchvision, which is not installed: pip install -e "
                              "'.[torch,download]' in the project's folder (or pip install 'zofl[torch,download]')")

    def broken(name):
        raise RuntimeError("operator torchvision::nms\n does not exist " + "x" * 300)

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(MissingExtra) as exc:
        require("torchvision", "zofl data get")
    said = str(exc.value)
    first = ("operator torchvision::nms does not exist " + "x" * 300)[:200]
    assert said == (f"zofl data get needs torchvision, which is installed but does not import (RuntimeError: {first}): "
                    f"install the release pyproject.toml pins for this torch (pip install -e '.[torch,download]' in "
                    f"the project's folder (or pip install 'zofl[torch,download]'))")
