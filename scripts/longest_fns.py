#!/usr/bin/env python3
"""Lists the longest Rust functions under crates/ (source files, tests left out unless
--tests): lines from the `fn` line to its closing brace, by brace counting on lines with
strings and comments stripped. Usage: scripts/longest_fns.py [--tests] [--most N] [ROOT]
"""
import pathlib
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")
STRING = re.compile(r'"(\\.|[^"\\])*"')
CHAR = re.compile(r"'(\\.|[^'\\])'")


def code_of(line):
    line = STRING.sub('""', line)
    line = CHAR.sub("' '", line)
    return line.split("//", 1)[0]


def functions(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = code_of(lines[j])
            if not opened and ";" in code and "{" not in code:
                break  # a declaration without a body (trait method)
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0:
                yield m.group(6), i + 1, j - i + 1
                break
            j += 1
        i += 1


def main(argv):
    tests = "--tests" in argv
    most = 15
    args = [a for a in argv if a != "--tests"]
    if "--most" in args:
        k = args.index("--most")
        most = int(args[k + 1])
        del args[k : k + 2]
    root = pathlib.Path(args[0] if args else ".")
    found = []
    for path in sorted((root / "crates").rglob("*.rs")):
        rel = path.relative_to(root)
        if not tests and ("tests" in rel.parts or rel.name.endswith("_tests.rs")):
            continue
        for name, line, length in functions(path):
            found.append((length, f"{rel}:{line}", name))
    for length, where, name in sorted(found, reverse=True)[:most]:
        print(f"{length:5}  {name}  {where}")


if __name__ == "__main__":
    main(sys.argv[1:])
