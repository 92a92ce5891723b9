"""Numbers quoted on a page, read from the study file they come from: one set of numbers for every page.

A page (Markdown under docs/) quotes a figure of a study as

    AFBO - FedNest: <!--n afbo_cleaning/study/summary.json#iid_nostragglers/paired_differences/afbo_minus_fednest/
    acc_at_T pts-->-0.78 +- 0.21<!--/n--> points           (on one line in the page)

(the comment is invisible where the page is rendered): the file under docs/results/, a path into its JSON
(keys separated by /, list items by index; a key that holds / itself is found too), and a format. This script
recomputes every such figure from its file and compares it with the text between the markers; ``--write``
rewrites the text instead. A test
(experiments/tests/test_doc_numbers.py) runs the check over every page, so a page and its study cannot differ.

Formats of a value [mean, half-width of the 95% interval, n] (the studies' summary.json convention) or a number:
    pts   fractions as points, signed:  +0.83 +- 0.25        pct   fractions as percent:  89.1 +- 0.2 (pct2: 89.14)
    loss  four decimals, signed:  -0.1543 +- 0.0092          num   as written in the file, three significant digits
    n     the count (the third item) ; int  an integer ; x  a ratio: 7.4 +- 2.5x
    f3    three decimals: 0.832 +- 0.008 ; d2, d1, d0  two, one, no decimals (e.g. seconds): 7.86 +- 2.67
    mag   pts without its sign (the size of a gap a sentence names as a lead or a loss): 0.78 +- 0.21
    str   a word as written in the file (e.g. a curve's reading: rising, stopped, undecided)
A CSV table under docs/results (e.g. a study's results.csv) is read as FILE.csv#COL=VALUE[,COL=VALUE]/COLUMN: the
one row whose columns hold those values, that row's COLUMN (a number).

    python experiments/doc_numbers.py            # check every page under docs/ (exit 1 on a difference)
    python experiments/doc_numbers.py --write    # rewrite the quoted text from the files
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository (--root: another tree laid out the same way)
MARK = re.compile(r"<!--n (?P<file>[\w./-]+)#(?P<path>[\w.\-/ ():,=+]+?) (?P<fmt>\w+)-->(?P<text>.*?)<!--/n-->", re.S)
PM = "+-"


def _interval(v, scale: float, digits: int, signed: bool, suffix: str = "") -> str:
    if isinstance(v, (int, float)):
        mean, hw = float(v), None
    else:
        mean, hw = float(v[0]), (float(v[1]) if len(v) > 1 and v[1] is not None else None)
    if not math.isfinite(mean):
        return "n/a"
    head = f"{mean * scale:{'+' if signed else ''}.{digits}f}"
    if hw is None or not math.isfinite(hw) or (len(v) > 2 and v[2] < 2):
        return head + suffix
    return f"{head} {PM} {hw * scale:.{digits}f}{suffix}"


FORMATS = {
    "pts": lambda v: _interval(v, 100, 2, True),
    "pct": lambda v: _interval(v, 100, 1, False),
    "pct2": lambda v: _interval(v, 100, 2, False),
    "loss": lambda v: _interval(v, 1, 4, True),
    "x": lambda v: _interval(v, 1, 1, False, "x"),
    "f3": lambda v: _interval(v, 1, 3, False),
    "d2": lambda v: _interval(v, 1, 2, False),
    "d1": lambda v: _interval(v, 1, 1, False),
    "d0": lambda v: _interval(v, 1, 0, False),
    "mag": lambda v: _interval([abs(float(v[0])), *v[1:]] if isinstance(v, list) else abs(float(v)), 100, 2, False),
    "num": lambda v: f"{float(v):.3g}",
    "int": lambda v: f"{int(v)}",
    "n": lambda v: f"{int(v[2])}",
    "str": lambda v: _word(v),
}


def _word(v: object) -> str:
    if not isinstance(v, str):
        raise KeyError(f"format str: {v!r} is not a word")
    return v


def csv_value(rows: list[dict], file: str, path: str) -> float:
    """A results.csv cell: ``path`` = COL=VALUE[,COL=VALUE...]/COLUMN, the one row whose columns hold those values."""
    where, _, column = path.rpartition("/")
    conds = [c.partition("=")[::2] for c in where.split(",") if c]
    hits = [r for r in rows if all(r.get(k) == v for k, v in conds)]
    if len(hits) != 1 or column not in hits[0]:
        raise KeyError(f"{file}#{path}: {len(hits)} rows match (need one, with column {column!r})")
    return float(hits[0][column])


def lookup(file: str, path: str, cache: dict, root: Path) -> object:
    """The value at ``path`` in docs/results/``file``: a JSON file (keys separated by /; list items by index) or a
    CSV table (``csv_value``); a KeyError naming what is missing."""
    results = (root / "docs" / "results").resolve()
    target = (results / file).resolve()
    if results not in target.parents or target.suffix not in (".json", ".csv") or not target.is_file():
        raise KeyError(f"{file}: not a JSON or CSV file under docs/results")
    if target not in cache:
        if target.suffix == ".csv":
            import csv

            with open(target, newline="") as fh:
                cache[target] = list(csv.DictReader(fh))
        else:
            cache[target] = json.loads(target.read_text())
    if target.suffix == ".csv":
        return csv_value(cache[target], file, path)
    value, parts = cache[target], path.split("/")
    while parts:
        part = parts.pop(0)
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
            continue
        # a key may itself hold '/' (e.g. "B=32/lr=0.1"): the shortest run of parts that names a key
        k = next((k for k in range(len(parts) + 1) if "/".join([part, *parts[:k]]) in value), None) \
            if isinstance(value, dict) else None
        if k is None:
            raise KeyError(f"{file}#{path}: no {part!r}")
        value, parts = value["/".join([part, *parts[:k]])], parts[k:]
    return value


def render(m: re.Match, cache: dict, root: Path) -> str:
    if m["fmt"] not in FORMATS:
        raise KeyError(f"{m['file']}#{m['path']}: unknown format {m['fmt']!r} (one of {', '.join(FORMATS)})")
    return FORMATS[m["fmt"]](lookup(m["file"], m["path"], cache, root))


def pages(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "docs").rglob("*.md") if p.is_file())


def check(paths: list[Path], write: bool = False, root: Path = ROOT) -> tuple[int, list[str]]:
    """(figures seen, one line per figure that differs from its file or cannot be read)."""
    cache: dict = {}
    seen, problems = 0, []
    for page in paths:
        text = page.read_text()

        def sub(m: re.Match) -> str:
            nonlocal seen
            seen += 1
            try:
                want = render(m, cache, root)
            except KeyError as e:
                problems.append(f"{page.relative_to(root)}: {e.args[0]}")
                return m[0]
            if m["text"] != want and not write:
                problems.append(f"{page.relative_to(root)}: {m['file']}#{m['path']} is {want!r}, the page says "
                                f"{m['text']!r}")
            return m[0][:m.start("text") - m.start()] + want + "<!--/n-->"

        before = seen
        new = MARK.sub(sub, text)
        if text.count("<!--n ") != seen - before:
            problems.append(f"{page.relative_to(root)}: {text.count('<!--n ') - (seen - before)} marker(s) that do "
                            f"not parse (<!--n FILE#PATH FORMAT-->TEXT<!--/n-->)")
        if write and new != text:
            page.write_text(new)
    return seen, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the quoted text from the study files")
    ap.add_argument("--root", type=Path, default=ROOT, help="the tree whose docs/ to read (default: this repository)")
    ap.add_argument("pages", nargs="*", type=Path, help="pages to check (default: every .md under docs/)")
    a = ap.parse_args(argv)
    root = a.root.resolve()
    seen, problems = check([p.resolve() for p in a.pages] or pages(root), write=a.write, root=root)
    for line in problems:
        print(line)
    print(f"{seen} quoted figures, {len(problems)} {'unreadable' if a.write else 'differing or unreadable'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
