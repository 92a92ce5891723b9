"""Where a mutation run stands, per package: read mutmut's verdicts from a copy it runs in (issue 52, item 3).

Run on demand, not in CI (the name does not start with ``test_``, so pytest does not collect it):

    python tests/mutation_status.py /tmp/zofl-mut              # the table, per package and in all
    python tests/mutation_status.py /tmp/zofl-mut --files      # per source file too
    python tests/mutation_status.py /tmp/zofl-mut --json docs/mutation-run-e.json --commit abc123
    python tests/mutation_status.py /tmp/zofl-mut --survivors zofl.methods.*   # survivors' names, for
                                                               # `mutmut show NAME` or `mutmut run NAMES`
    python tests/mutation_status.py /tmp/zofl-mut --verdicts docs/mutation-verdicts-e.json  # the tables with
                          # each survivor's verdict applied (--survivors then lists those without one)
    python tests/mutation_status.py /tmp/zofl-mut --verdicts docs/mutation-verdicts-e.json --add-verdicts V.txt
                          # add verdicts (lines name|verdict|why; verdict: harmless, out of reach or left)
    python tests/mutation_status.py --process-tests             # the tests [tool.mutmut] deselects
    python tests/mutation_status.py /tmp/zofl-mut --restore docs/mutation-run-e.json  # a new copy resumes
                                                               # from the verdicts of a saved run

``--restore``: a copy made afresh (a new machine, /tmp wiped) first lets ``mutmut run`` write its mutants
(stop it once it starts collecting test statistics), then takes the saved verdicts of every function whose code
(mutmut's hash of it) and mutant count are unchanged (a changed function's mutants stay unchecked); the next
``mutmut run`` goes on with the unchecked ones only.

mutmut keeps each mutant's last exit code in ``mutants/<source>.meta`` (JSON: ``exit_code_by_key``, mutant
name -> exit code, ``null`` while unchecked); the codes mean what mutmut's own ``status_by_exit_code`` says
(1 and 3 killed, 0 survived, 33 and 5 no tests, 36, 24, -24, 152 and 255 timeout, null not checked). "Kill
rate" is (killed + timeouts) / checked, where checked counts every mutant with a verdict; a mutant no test
reaches ("no tests") is checked and not killed.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import sys
import tomllib
from pathlib import Path

KILLED, TIMEOUT, SURVIVED, NO_TESTS, UNCHECKED, OTHER = "k", "t", "s", "n", "u", "?"
# a survivor's (or "no tests" mutant's) verdict, docs/mutation-verdicts-e.json: harmless (equivalent: out of the
# rate's denominator), out of reach (import-time code, planted in the work tree and caught: counted as killed),
# left (a real difference no test sees: counted as not killed)
HARMLESS, REACH, LEFT = "h", "o", "l"
VERDICTS = {"harmless": HARMLESS, "out of reach": REACH, "left": LEFT}
LETTER = {1: KILLED, 3: KILLED, 0: SURVIVED, 5: NO_TESTS, 33: NO_TESTS, None: UNCHECKED,
          36: TIMEOUT, 24: TIMEOUT, -24: TIMEOUT, 152: TIMEOUT, 255: TIMEOUT}
LEGEND = ("one letter per mutant, mutant 1 first: k killed, t timeout, s survived, n no tests (no test reaches "
          "it), u not checked, ? anything else (suspicious, segfault, interrupted)")
PACKAGES = ("algorithms", "core", "methods", "strategies", "tasks")
ROOT = Path(__file__).resolve().parents[1]


# what starts a process in a test (a child imports the package unmutated, or mutmut's copy from a folder without
# its configuration: it can kill no mutant, and mutmut's runs stop on its failures)
PROCESS_STARTS = ("subprocess.", "Popen", "sys.executable", "local_superlink", "local_ray_cluster", "os.fork",
                  "multiprocessing")


def selection(option: str) -> list[str]:
    """What [tool.mutmut]'s test selection gives ``option`` (``--ignore``: the test files left out whole,
    ``--deselect``: the tests left out by name), in its order."""
    args = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["pytest_add_cli_args_test_selection"]
    return [a.split("=", 1)[1] for a in args if a.startswith(option + "=")]


def process_tests() -> list[str]:
    """The tests, in the test files mutmut runs, that start a process themselves or through a helper of their
    file (not marked ``flower``: those are not run), as pytest node ids."""
    out = []
    ignored = set(selection("--ignore"))
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        rel = f"tests/{f.name}"
        if rel in ignored:
            continue
        src = f.read_text()
        lines = src.splitlines()
        funcs = {n.name: n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)}
        text = {name: "\n".join(lines[n.lineno - 1:n.end_lineno]) for name, n in funcs.items()}
        starts = {name for name in funcs if any(k in text[name] for k in PROCESS_STARTS)}
        grew = True
        while grew:  # the helpers that call a helper that starts one
            grew = False
            for name, n in funcs.items():
                calls = {c.func.id for c in ast.walk(n) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
                if name not in starts and calls & starts:
                    starts.add(name)
                    grew = True
        for name in sorted(starts):
            marks = " ".join(ast.unparse(d) for d in funcs[name].decorator_list)
            if name.startswith("test_") and "flower" not in marks:
                out.append(f"{rel}::{name}")
    return out


def split_name(name: str) -> tuple[str, int]:
    """``zofl.methods.afbo.x_f__mutmut_12`` -> ("zofl.methods.afbo.x_f", 12)."""
    function, n = name.rsplit("__mutmut_", 1)
    return function, int(n)


def read_status(copy: Path) -> dict[str, str]:
    """{function key (``zofl.methods.afbo.x_client_work``, or ``...xǁClassǁmethod``): letters, mutant 1 first}."""
    root = copy / "mutants"
    if not (root / "zofl").is_dir():
        raise SystemExit(f"{root / 'zofl'} not found: give the folder `mutmut run` runs in")
    status: dict[str, dict[int, str]] = {}
    for meta in sorted((root / "zofl").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in codes.items():
            function, n = split_name(name)
            status.setdefault(function, {})[n] = LETTER.get(code, OTHER)
    return {f: "".join(by[i] for i in sorted(by)) for f, by in sorted(status.items())}


CODE = {KILLED: 1, TIMEOUT: 36, SURVIVED: 0, NO_TESTS: 33}


def restore(copy: Path, saved: Path) -> tuple[int, int]:
    """Write the verdicts of ``saved`` (a ``--json`` file) into the meta files of ``copy``'s generated mutants;
    returns (mutants restored, functions skipped because their mutant count differs)."""
    run = json.loads(saved.read_text())
    status, hashes = run["status"], run.get("hashes", {})
    restored = skipped = 0
    metas = sorted((copy / "mutants" / "zofl").rglob("*.py.meta"))
    if not metas:
        raise SystemExit(f"no mutants in {copy / 'mutants'}: let `mutmut run` write them first")
    for meta in metas:
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        now = _hashes(meta, data)
        by_function: dict[str, list[str]] = {}
        for name in codes:
            by_function.setdefault(split_name(name)[0], []).append(name)
        for function, names in by_function.items():
            letters = status.get(function)
            if letters is None or len(letters) != len(names) or \
                    (function in hashes and hashes[function] != now.get(function)):
                skipped += letters is not None
                continue
            for name in names:
                code = CODE.get(letters[split_name(name)[1] - 1])
                if code is not None:
                    codes[name] = code
                    restored += 1
        meta.write_text(json.dumps(data))
    return restored, skipped


def mutant_diff(copy: Path, name: str) -> str:
    """The lines a mutant changes ("-old" / "+new", as ``mutmut show NAME`` prints them)."""
    import os

    here = os.getcwd()
    os.chdir(copy)
    sys.path.insert(0, str(copy))
    try:
        import mutmut.__main__ as mm

        diff = mm.get_diff_for_mutant(name, path=mm.find_mutant(name).path)
    finally:
        os.chdir(here)
        sys.path.remove(str(copy))
    return "\n".join(line for line in diff.splitlines()
                     if line.startswith(("-", "+")) and not line.startswith(("---", "+++")))


def add_verdicts(copy: Path, lines: Path, out: Path) -> int:
    """Add the verdicts of ``lines`` (one per line: ``name|verdict|why``; verdict one of VERDICTS) to the file
    ``out`` (created if missing), each with the mutant's diff in ``copy``, so that a verdict is applied only while
    its mutant is the same change (a function edited since regenerates its mutants). Returns how many."""
    data = json.loads(out.read_text()) if out.exists() else {"legend": VERDICT_LEGEND, "verdicts": {}}
    n = 0
    for line in lines.read_text().splitlines():
        if not line.strip():
            continue
        name, verdict, why = line.split("|", 2)
        if verdict not in VERDICTS:
            raise SystemExit(f"{lines}: {name}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        data["verdicts"][name] = {"verdict": verdict, "why": why, "diff": mutant_diff(copy, name)}
        n += 1
    data["verdicts"] = dict(sorted(data["verdicts"].items()))
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return n


VERDICT_LEGEND = ("a verdict per survivor or 'no tests' mutant of run E: harmless (equivalent to the original for "
                  "every input the code can get, or only a message's text no test reads: left out of the rate's "
                  "denominator), out of reach (code that runs at import, before mutmut switches a mutant on: "
                  "planted in the work tree instead and caught, counted as killed), left (a real difference no "
                  "test sees); diff: the mutant's change, the verdict applies only while it is the same")


def apply_verdicts(copy: Path, status: dict[str, str], verdicts: Path,
                   diff=mutant_diff) -> tuple[dict[str, str], list[str]]:
    """``status`` with each survivor or "no tests" mutant that has a verdict (whose diff still matches) lettered
    by it; and the names of the verdicts that no longer apply (their mutant changed)."""
    out = {f: list(letters) for f, letters in status.items()}
    stale = []
    for name, v in json.loads(verdicts.read_text())["verdicts"].items():
        function, i = split_name(name)
        letters = out.get(function)
        if letters is None or i > len(letters):
            stale.append(name)
            continue
        if letters[i - 1] not in (SURVIVED, NO_TESTS):
            continue  # killed since (a test added), or not checked yet
        if diff(copy, name) != v["diff"]:
            stale.append(name)
            continue
        letters[i - 1] = VERDICTS[v["verdict"]]
    return {f: "".join(v) for f, v in out.items()}, stale


def _module_of(meta: Path) -> str:
    """``.../mutants/zofl/methods/afbo.py.meta`` -> "zofl.methods.afbo" (a package's ``__init__``: the package)."""
    rel = meta.resolve().as_posix().split("/mutants/", 1)[1][:-len(".py.meta")].split("/")
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def _hashes(meta: Path, data: dict) -> dict[str, str]:
    """{function key: mutmut's hash of its code} of one source file's meta (its JSON ``data``)."""
    return {f"{_module_of(meta)}.{f}": h for f, h in data.get("hash_by_function_name", {}).items()}


def read_hashes(copy: Path) -> dict[str, str]:
    """{function key: mutmut's hash of its code} of the copy's generated mutants (a saved run's verdicts apply only
    to a function whose code is the same)."""
    out = {}
    for meta in sorted((copy / "mutants" / "zofl").rglob("*.py.meta")):
        out.update(_hashes(meta, json.loads(meta.read_text())))
    return out


def group_of(function: str) -> str:
    """``zofl.methods.afbo.x_f`` -> "methods"; a top-level module's -> "zofl/*.py"."""
    part = function.split(".")[1]
    return part if part in PACKAGES else "zofl/*.py"


def source_of(function: str) -> str:
    """``zofl.methods.afbo.x_f`` -> "zofl/methods/afbo.py"; a package's own function -> its ``__init__.py``."""
    mod = function.split(".x_")[0].split(".xǁ")[0].replace(".", "/")
    return f"{mod}/__init__.py" if (ROOT / mod).is_dir() else f"{mod}.py"


def table(status: dict[str, str], by) -> list[str]:
    counts: dict[str, dict[str, int]] = {}
    for function, letters in status.items():
        c = counts.setdefault(by(function), {})
        for ch in letters:
            c[ch] = c.get(ch, 0) + 1
    total: dict[str, int] = {}
    for c in counts.values():
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    lines = ["| source | mutants | checked | killed + timeouts | out of reach (planted, caught) | harmless | "
             "left | survived, no verdict yet | no tests | other | not checked | killed of the non-equivalent |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in [*sorted(counts.items()), ("**all**", total)]:
        n = sum(c.values())
        checked = n - c.get(UNCHECKED, 0)
        killed = c.get(KILLED, 0) + c.get(TIMEOUT, 0) + c.get(REACH, 0)
        rated = checked - c.get(HARMLESS, 0)
        rate = f"{100 * killed / rated:.1f}%" if rated else "-"
        lines.append(f"| {name} | {n:,} | {checked:,} | {c.get(KILLED, 0):,} + {c.get(TIMEOUT, 0):,} | "
                     f"{c.get(REACH, 0):,} | {c.get(HARMLESS, 0):,} | {c.get(LEFT, 0):,} | "
                     f"{c.get(SURVIVED, 0):,} | {c.get(NO_TESTS, 0):,} | {c.get(OTHER, 0):,} | "
                     f"{c.get(UNCHECKED, 0):,} | {rate} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("copy", type=Path, nargs="?", help="the folder `mutmut run` runs in (it holds mutants/)")
    ap.add_argument("--process-tests", action="store_true",
                    help="list the tests that start a process (what [tool.mutmut] deselects)")
    ap.add_argument("--files", action="store_true", help="a row per source file too")
    ap.add_argument("--json", type=Path, help="write every mutant's status here (one letter per mutant)")
    ap.add_argument("--commit", default="", help="the commit the run's copy was made from (for --json)")
    ap.add_argument("--verdicts", type=Path, metavar="JSON",
                    help="apply these verdicts (docs/mutation-verdicts-e.json) to the survivors in the tables")
    ap.add_argument("--add-verdicts", type=Path, metavar="TEXT",
                    help="add the verdicts of TEXT (lines name|verdict|why) to the --verdicts file, with each diff")
    ap.add_argument("--restore", type=Path, metavar="JSON",
                    help="write a saved run's verdicts (a --json file) into this copy's generated mutants")
    ap.add_argument("--survivors", nargs="*", metavar="PATTERN",
                    help="print the survivors' and no-tests mutants' names (all, or those matching a pattern)")
    args = ap.parse_args(argv)
    if args.process_tests:
        print("\n".join(process_tests()))
        return 0
    if args.copy is None:
        ap.error("give the folder `mutmut run` runs in")
    if args.restore:
        restored, skipped = restore(args.copy, args.restore)
        print(f"restored {restored:,} verdicts from {args.restore}; {skipped} functions skipped (changed)")
        return 0
    if args.add_verdicts:
        if not args.verdicts:
            ap.error("--add-verdicts needs --verdicts FILE (where they go)")
        print(f"{add_verdicts(args.copy, args.add_verdicts, args.verdicts)} verdicts added to {args.verdicts}")
        return 0
    status = raw = read_status(args.copy)
    if args.verdicts:
        status, stale = apply_verdicts(args.copy, status, args.verdicts)
        if stale:
            print(f"{len(stale)} verdicts no longer apply (their mutant changed): {', '.join(stale[:10])}"
                  f"{' ...' if len(stale) > 10 else ''}\n", file=sys.stderr)
    if args.survivors is not None:
        pats = args.survivors or ["*"]
        for function, letters in status.items():
            for i, ch in enumerate(letters):
                name = f"{function}__mutmut_{i + 1}"
                if ch in (SURVIVED, NO_TESTS) and any(fnmatch.fnmatchcase(name, p) for p in pats):
                    print(name)
        return 0
    print("\n".join(table(status, group_of)))
    if args.files:
        print()
        print("\n".join(table(status, source_of)))
    if args.json:
        args.json.write_text(json.dumps({"commit": args.commit, "legend": LEGEND, "status": raw,
                                         "hashes": read_hashes(args.copy)}, indent=0,
                                        ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
