"""Runs the schemathesis command line with ast.parse serialised across threads.

With `--workers 2` two threads may describe a strategy's lambda at the same time, and
hypothesis does it with ast.parse. CPython 3.11's AST conversion keeps its recursion depth
per interpreter, not per thread (fixed in later releases), so two concurrent parses can fail
with "SystemError: AST constructor recursion depth mismatch", which schemathesis reports as
an error of the operation under test. A lock around ast.parse removes the race; nothing else
changes.
"""

import ast
import sys
import threading

_PARSE_LOCK = threading.Lock()
_parse = ast.parse


def _serialised_parse(*args, **kwargs):
    with _PARSE_LOCK:
        return _parse(*args, **kwargs)


ast.parse = _serialised_parse

from schemathesis.cli import schemathesis  # noqa: E402  (after the patch it relies on)

if __name__ == "__main__":
    sys.argv[0] = "schemathesis"
    sys.exit(schemathesis())
