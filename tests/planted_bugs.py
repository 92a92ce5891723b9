"""The planted-bug table as a regression list (issue 52, item 4): plant each bug in a temporary copy of the
repository and check that the tests listed for it fail. Runnable on demand, not in CI (the name does not start
with ``test_``, so pytest does not collect it):

    python tests/planted_bugs.py                 # every bug; exits 1 if a bug was missed
    python tests/planted_bugs.py --only scaffold-correction-sign dirichlet-inverse-alpha
    python tests/planted_bugs.py --list          # the table
    python tests/planted_bugs.py --baseline      # first check that the listed tests pass unplanted

Each entry names a file (relative to the repository), the exact original text (it must occur exactly once in
the file: otherwise the entry is stale and the script says so), its replacement, and the tests (files or node
ids) that must fail with it. For each bug the script copies the working tree's files (``git ls-files``:
tracked and untracked-but-not-ignored, as they are on disk, so uncommitted edits are checked too) to a
temporary directory, plants the bug there, and runs ``python -m pytest -q -x -p no:cacheprovider <tests>`` in
the copy with PYTHONPATH=<copy>, so that the copy's ``zofl`` is imported rather than the editable install's
(checked before each run). The repository itself is never touched. A bug is "caught" when pytest reports
failed tests (exit code 1), "MISSED" when they pass; any other outcome (no tests collected, a test id that no
longer exists, a collection error caused by the replacement itself) is an ERROR: the table needs fixing; a
pytest run that times out is reported as "caught?" and, like MISSED, makes the exit code 1.

With ``-x`` only a bug's first failing test runs; the tests listed after it are the backups (the slower e2e
run for the default run name, for instance), each of which was checked to catch its bug on its own too.
``--baseline`` checks the other half of the claim: that the listed tests pass without the bug.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Bug:
    name: str
    file: str  # relative to the repository
    original: str  # exact text, found exactly once in ``file``
    replacement: str
    tests: tuple[str, ...]  # test files or node ids, relative to the repository; the fast ones first
    what: str = ""


BUGS: list[Bug] = [
    Bug("two-point-eta-squared", "zofl/algorithms/smoothing.py",
        "    return (n / (2.0 * eta)) * (np.asarray(f_plus",
        "    return (n / (2.0 * eta ** 2)) * (np.asarray(f_plus",
        ("tests/test_smoothing.py",),
        "two-point zeroth-order estimate scaled by n/(2 eta^2) instead of n/(2 eta)"),
    Bug("fedrzo-bl-warm-start-y-plus", "zofl/methods/fedrzo_bl.py",
        'state["y_hat"] = (state["y_base"] if self.hp.lower_warm_start else self.y0).copy()',
        'state["y_hat"] = (state["y_plus"] if self.hp.lower_warm_start else self.y0).copy()',
        ("tests/test_pinned_methods.py::test_fedrzo_bl_oracle_calls_start_from_the_last_y_base",),
        "FedRZO_bl's lower-level oracle warm-started from y_plus instead of y_base"),
    Bug("aphe-step-sign", "zofl/algorithms/afbo.py",
        "        for j in range(depth):\n            p = p - hvp(p, hess[j]) / lipschitz",
        "        for j in range(depth):\n            p = p + hvp(p, hess[j]) / lipschitz",
        ("tests/test_afbo.py::test_random_depth_aphe_walks_every_depth_and_averages_to_the_truncated_series",
         "tests/test_afbo.py::test_random_depth_aphe_with_numpys_generator_is_uniform_and_unbiased"),
        "APHE's (random-depth, the default) Neumann step p + Hp/l instead of p - Hp/l"),
    Bug("afbo-version-from-current-state", "zofl/methods/afbo.py",
        "computed_on = self.version_of(state) - int(staleness)",
        "computed_on = self.version_of(state)",
        ("tests/test_pinned_methods.py::test_afbo_records_each_used_update_with_the_version_it_was_computed_on",),
        "AFBO's update version taken from the current state, not the version its task was computed on"),
    Bug("fednest-neumann-adds-previous-term", "zofl/algorithms/afbo.py",
        "    term = term - hv / lipschitz\n    return term, h + term",
        "    new_term = term - hv / lipschitz\n    return new_term, h + term",
        ("tests/test_afbo.py::test_the_truncated_series_tends_to_the_exact_hypergradient",
         "tests/test_afbo.py::test_afbo_and_fednest_reach_the_closed_form_solution"),
        "FedNest's Neumann sum (neumann_term) adds the previous term instead of the new one"),
    Bug("scaffnew-control-sign", "zofl/algorithms/scaffnew.py",
        "return h + (p / gamma) * (x_new - x_hat)",
        "return h - (p / gamma) * (x_new - x_hat)",
        ("tests/test_scaffnew.py::test_a_communication_and_the_control_update_by_hand",
         "tests/test_scaffnew.py::test_scaffnew_reaches_the_exact_optimum_where_local_gd_drifts"),
        "Scaffnew's control update h_i + (p/gamma)(x - x^_i) with its sign flipped"),
    Bug("scaffold-correction-sign", "zofl/methods/scaffold.py",
        "correction=c - c_i)",
        "correction=c_i - c)",
        ("tests/test_pinned_methods.py::test_scaffold_correction_turns_each_clients_steps_into_global_gradient_steps",),
        "SCAFFOLD's local-step correction c_i - c instead of c - c_i"),
    Bug("dirichlet-inverse-alpha", "zofl/tasks/data.py",
        "alphas = np.array([float(alpha)], dtype=float).repeat(m)",
        "alphas = np.array([1.0 / float(alpha)], dtype=float).repeat(m)",
        ("tests/test_data.py::test_large_alpha_is_near_iid_and_small_alpha_is_skewed",),
        "the Dirichlet partition's alpha used as 1/alpha"),
    Bug("async-staleness-plus-one", "zofl/core/asynchronous.py",
        "                self.state = self.method.receive(self.state, result, self.version - task.version)\n"
        "                self.buffer.append((result, self.version - task.version))",
        "                self.state = self.method.receive(self.state, result, self.version - task.version + 1)\n"
        "                self.buffer.append((result, self.version - task.version + 1))",
        ("tests/test_pinned_methods.py::test_afbo_records_each_used_update_with_the_version_it_was_computed_on",
         "tests/test_async_records.py::test_afbo_records_list_the_updates_each_step_used_with_their_own_delays",
         "tests/test_async_reference.py::test_the_asynchronous_engine_gives_the_reference_numbers"),
        "the asynchronous engine's staleness of a reply one version too large"),
    Bug("wire-replies-float32", "zofl/strategies/wire.py",
        "    return RecordDict({ARRAYS: array_record(reply.arrays),",
        "    return RecordDict({ARRAYS: array_record({k: (np.asarray(v).astype(np.float32).astype(np.float64)"
        " if np.asarray(v).dtype == np.float64 else v) for k, v in reply.arrays.items()}),",
        ("tests/test_wire_and_names.py::test_message_api_work_and_replies_keep_float64",),
        "replies cast to float32 on the wire (and back to float64: the dtype checks pass, only values change)"),
    Bug("server-default-run-name-dropped", "zofl/server_app.py",
        "run_name = cfg.run_name or default_run_name(cfg.strategy, cfg.dataset)",
        "run_name = cfg.run_name",
        ("tests/test_wire_and_names.py::test_a_run_without_run_name_writes_to_its_default_folder_in_process",
         "tests/test_flower_e2e.py::test_afbo_on_the_async_engine_under_the_simulated_clock_matches_in_process"),
        "the ServerApp's default run name dropped (a run without run-name)"),
    Bug("async-resume-task-no-minus-one", "zofl/core/asynchronous.py",
        'self.task_no = int(extra["task_no"])',
        'self.task_no = int(extra["task_no"]) - 1',
        ("tests/test_async.py::test_resume_under_the_simulated_clock_gives_the_uninterrupted_run",
         "tests/test_resume_validation.py::test_an_unedited_asynchronous_checkpoint_still_resumes_bit_for_bit"),
        "a resumed asynchronous run restoring task_no - 1"),
    Bug("eval-every-server-every-round", "zofl/core/evaluation.py",
        "    return k % every == 0 or k == total",
        "    return True",
        ("tests/test_eval_every.py::test_eval_every_evaluates_only_its_rounds_and_changes_no_number",),
        "eval-every ignored by the server: a full test pass every round"),
    Bug("eval-every-last-round-not-evaluated", "zofl/core/evaluation.py",
        "    return k % every == 0 or k == total",
        "    return k % every == 0",
        ("tests/test_eval_every.py::test_eval_every_evaluates_only_its_rounds_and_changes_no_number",
         "tests/test_eval_every.py::test_a_resume_gives_the_uninterrupted_run"),
        "the last round not evaluated by the server when eval-every does not divide it (no final accuracy)"),
    Bug("startup-node-map-never-recorded", "zofl/core/run.py",
        'self.startup.node_map_s = getattr(fed, "learned_s", None)',
        "self.startup.node_map_s = None",
        ("tests/test_startup.py::test_a_run_s_summary_says_where_its_start_up_went_and_a_resume_says_its_own",
         "tests/test_startup.py::test_the_asynchronous_engine_reports_its_first_update"),
        "summary.json's startup without the time the server spent learning the node map"),
    Bug("startup-first-round-from-round-0", "zofl/core/run.py",
        "            self._write_record(0, {})\n        self.startup.ready()",
        "            self.startup.ready()\n            self._write_record(0, {})\n        self.startup.ready()",
        ("tests/test_startup.py::test_a_run_s_summary_says_where_its_start_up_went_and_a_resume_says_its_own",),
        "the first round's clock started before x_0's record, so round 0 counts as the first round"),
    Bug("startup-round-1-only", "zofl/core/startup.py",
        "        if self.first_round is None and self.t_ready is not None:",
        "        if k == 1 and self.first_round is None and self.t_ready is not None:",
        ("tests/test_startup.py::test_a_run_s_summary_says_where_its_start_up_went_and_a_resume_says_its_own",
         "tests/test_flower_e2e.py::test_zofl_run_killed_then_resumed_through_flower_gives_the_in_process_numbers"),
        "the first round's time taken from round 1 only: a resume reports none"),
    Bug("startup-set-up-counts-the-node-map", "zofl/core/startup.py",
        "setup = max(0.0, self.t_ready - self.t0 - (self.node_map_s or 0.0))",
        "setup = max(0.0, self.t_ready - self.t0)",
        ("tests/test_startup.py::test_the_set_up_is_the_server_s_time_to_its_first_round_less_the_node_map",),
        "the server's set-up counting the node map's time twice"),
    Bug("startup-line-dropped", "zofl/core/summary.py",
        '            *startup_line(s.get("startup")),\n',
        "",
        ("tests/test_core_edges.py::test_the_printed_summary_says_every_part_of_a_run_s_outcome",
         "tests/test_startup.py::test_a_run_s_summary_says_where_its_start_up_went_and_a_resume_says_its_own"),
        "the printed summary without its start-up line"),
    Bug("startup-runtime-stamp-not-passed", "zofl/launch.py",
        "env = {**flwr_env(home), **(extra_env or {})}",
        "env = flwr_env(home)",
        ("tests/test_flower_e2e.py::test_zofl_run_killed_then_resumed_through_flower_gives_the_in_process_numbers",),
        "zofl run's start time never reaches the ServerApp: runtime_s null under zofl run"),
]


def repo_files() -> list[str]:
    """The working tree's files as git sees them: tracked (skipping ones deleted on disk) and untracked but not
    ignored."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (REPO / f).is_file()})


def copy_repo(dest: Path, files: list[str]) -> None:
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, target, follow_symlinks=False)


def stale(root: Path, bug: Bug) -> str | None:
    """Why ``bug`` cannot be planted under ``root`` (its entry is stale), or None."""
    path = root / bug.file
    if not path.is_file():
        return f"{bug.file} does not exist"
    n = path.read_text().count(bug.original)
    if n != 1:
        return f"its original text occurs {n} times in {bug.file} (want exactly once): {bug.original!r}"
    return None


def plant(root: Path, bug: Bug) -> str | None:
    """Apply ``bug`` under ``root``; the reason it cannot be applied (a stale entry), or None."""
    why = stale(root, bug)
    if why is None:
        path = root / bug.file
        path.write_text(path.read_text().replace(bug.original, bug.replacement))
    return why


def test_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no bytecode in the copy: nothing stale, whatever the mtimes
    return env


def imports_copy(root: Path, env: dict[str, str]) -> str | None:
    """None if ``import zofl`` run in ``root`` resolves to the copy, else where it resolves to."""
    out = subprocess.run([sys.executable, "-c", "import zofl; print(zofl.__file__)"], cwd=root, env=env,
                         capture_output=True, text=True)
    where = out.stdout.strip()
    if out.returncode == 0 and Path(where).resolve().is_relative_to(root.resolve()):
        return None
    return where or out.stderr.strip()[-500:]


def run_tests(root: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
    """(outcome, detail): outcome "failed" / "passed" / "timeout" / "error" of pytest over ``tests`` in ``root``."""
    env = test_env(root)
    where = imports_copy(root, env)
    if where is not None:
        return "error", f"`import zofl` in the copy resolves to {where}, not to the copy"
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout,
                             start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timeout", f"pytest still running after {timeout:.0f} s"
    lines = (out.stdout + out.stderr).strip().splitlines()
    if out.returncode == 1:
        failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
        return "failed", (failed[0] if failed else lines[-1] if lines else "")
    if out.returncode == 0:
        return "passed", lines[-1] if lines else ""
    return "error", f"pytest exit code {out.returncode}:\n" + "\n".join(lines[-25:])


def check(bug: Bug | None, tests: tuple[str, ...], files: list[str], timeout: float, keep: bool
          ) -> tuple[str, str, float]:
    """Copy, plant ``bug`` (None: nothing), run ``tests``: (outcome, detail, seconds)."""
    start = time.monotonic()
    if bug is not None and (why := stale(REPO, bug)):  # the copy would be the same: say so before copying
        return "stale", why, time.monotonic() - start
    root = Path(tempfile.mkdtemp(prefix="zofl-planted-"))
    try:
        copy_repo(root, files)
        if bug is not None and (why := plant(root, bug)):
            return "stale", why, time.monotonic() - start
        outcome, detail = run_tests(root, tests, timeout)
        return outcome, detail, time.monotonic() - start
    finally:
        if keep:
            print(f"    (copy kept in {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def print_table(bugs: list[Bug]) -> None:
    for b in bugs:
        print(f"{b.name}  [{b.file}]")
        print(f"    {b.what}")
        print(f"    - {b.original!r}")
        print(f"    + {b.replacement!r}")
        for t in b.tests:
            print(f"    test: {t}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these bugs (names as in --list)")
    ap.add_argument("--list", action="store_true", help="print the table and exit")
    ap.add_argument("--baseline", action="store_true",
                    help="first run the selected bugs' tests on an unplanted copy: they must pass")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run (default 900)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copies (their paths are printed)")
    args = ap.parse_args(argv)

    bugs = BUGS
    if args.only:
        unknown = sorted(set(args.only) - {b.name for b in BUGS})
        if unknown:
            ap.error(f"unknown bug name(s) {unknown}; known: {[b.name for b in BUGS]}")
        bugs = [b for b in BUGS if b.name in args.only]
    if args.list:
        print_table(bugs)
        return 0

    files = repo_files()
    total = time.monotonic()
    bad = []
    if args.baseline:
        tests = tuple(dict.fromkeys(t for b in bugs for t in b.tests))
        outcome, detail, secs = check(None, tests, files, args.timeout, args.keep)
        ok = outcome == "passed"
        print(f"{'baseline':34s} {'passes' if ok else 'FAILS: ' + outcome:10s} {secs:6.1f} s  {detail}", flush=True)
        if not ok:
            print("the listed tests do not pass on the unplanted tree: a planted bug cannot be judged", flush=True)
            return 1
    for bug in bugs:
        outcome, detail, secs = check(bug, bug.tests, files, args.timeout, args.keep)
        status = {"failed": "caught", "timeout": "caught?", "passed": "MISSED"}.get(outcome, outcome.upper())
        if outcome == "timeout":
            detail += " (a hang: the suite does not pass, but it does not fail cleanly either)"
        if status != "caught":
            bad.append(bug.name)
        first, *rest = detail.splitlines() or [""]
        print(f"{bug.name:34s} {status:8s} {secs:6.1f} s  {first}", flush=True)
        for ln in rest:
            print(f"    {ln}", flush=True)
        if outcome == "stale":
            print(f"    the entry {bug.name!r} is stale: update its entry in tests/planted_bugs.py", flush=True)
    print(f"{len(bugs) - len(bad)}/{len(bugs)} caught in {time.monotonic() - total:.1f} s"
          + (f"; not caught: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
