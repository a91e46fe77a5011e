#!/usr/bin/env python3
"""Counts the lines that the PostgreSQL and SQLite stores repeat: for each file name present in
both `crates/parley-store/src/pg/` and `crates/parley-store/src/sqlite/`, the lines the two
files share in the same order (difflib's matching blocks), after leaving out blank lines,
comments, `use` lines and lines of lone punctuation, and folding white space. Prints one line per file and the total.

Usage: scripts/shared_lines.py [--min-run N] [ROOT]   (ROOT: the repository, default: here)
With --min-run N only matching runs of at least N lines count (default 1: every shared line).
"""
import difflib
import pathlib
import re
import sys

# The shortest run that counts as shared control flow.
RUN_LINES_MIN = 6

# Lines of closing brackets and separators alone say nothing about shared logic.
PUNCTUATION_ONLY = re.compile(r"[\s{}()\[\];,.?]*")


def normalized(path):
    out = []
    in_use = False
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = " ".join(raw.split())
        if in_use:
            # A multi-line `use` ends at its semicolon.
            in_use = not line.endswith(";")
            continue
        if not line or line.startswith("//") or PUNCTUATION_ONLY.fullmatch(line):
            continue
        if line.startswith(("use ", "pub use ", "pub(crate) use ", "pub(super) use ")):
            in_use = not line.endswith(";")
            continue
        out.append(line)
    return out


def main(argv):
    min_run = 1
    args = list(argv)
    if args[:1] == ["--min-run"]:
        min_run = int(args[1])
        args = args[2:]
    root = pathlib.Path(args[0] if args else ".")
    pg = root / "crates/parley-store/src/pg"
    sq = root / "crates/parley-store/src/sqlite"
    total = 0
    for a in sorted(pg.glob("*.rs")):
        b = sq / a.name
        if not b.exists():
            continue
        la, lb = normalized(a), normalized(b)
        matcher = difflib.SequenceMatcher(None, la, lb, autojunk=False)
        shared = sum(m.size for m in matcher.get_matching_blocks() if m.size >= min_run)
        total += shared
        print(f"{a.stem:12} {shared:5}  (pg {len(la)}, sqlite {len(lb)})")
    print(f"{'total':12} {total:5}")
    # Renamed or split files escape the pairing by name: list every run of six or more lines
    # that any file of one store shares with any file of the other.
    runs = []
    for a in sorted(pg.glob("*.rs")):
        la = normalized(a)
        for b in sorted(sq.glob("*.rs")):
            lb = normalized(b)
            matcher = difflib.SequenceMatcher(None, la, lb, autojunk=False)
            for m in matcher.get_matching_blocks():
                if m.size >= RUN_LINES_MIN:
                    runs.append((m.size, f"pg/{a.name}", f"sqlite/{b.name}", la[m.a]))
    print(f"runs of {RUN_LINES_MIN}+ shared lines between any pg/ and sqlite/ files: {len(runs)}")
    for size, a, b, first in sorted(runs, reverse=True):
        print(f"  {size:4}  {a} ~ {b}: {first[:60]}")


if __name__ == "__main__":
    main(sys.argv[1:])
