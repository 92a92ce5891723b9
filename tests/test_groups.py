"""The xdist groups of tests/conftest.py hold: tests of one group run in one worker, one at a time. pytest 9.2
silently broke pytest-xdist's --dist loadgroup (pytest-dev/pytest-xdist#1386: no group suffix, tests dealt out
as if unmarked), and nothing failed: Ray runs meant to run one at a time overlapped for weeks. This runs the
README's test command's xdist options on a tiny suite of its own, with the installed pytest and xdist."""
import subprocess
import sys
import textwrap


def test_a_group_runs_in_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text("")
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(textwrap.dedent(f"""
            import os, pytest

            @pytest.mark.xdist_group("g")
            @pytest.mark.parametrize("i", range(4))
            def test_grouped(i):
                with open({str(tmp_path / "workers.txt")!r}, "a") as f:
                    f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

            @pytest.mark.parametrize("i", range(4))
            def test_free(i):
                pass
        """))
    res = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
                          "-p", "no:cacheprovider",
                          str(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 8 and len(set(workers)) == 1, f"the group ran in workers {workers}"
