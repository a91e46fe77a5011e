"""Counts the requests and the failed checks of one schemathesis NDJSON report.

Prints `<requests> <failures>`: every recorded interaction is one request the API answered,
and every check whose status is `failure` is one failure (an error of the run counts too).
"""

import json
import sys


def counts(path):
    requests = 0
    failures = 0
    with open(path, encoding="utf-8") as report:
        for line in report:
            event = json.loads(line)
            if "NonFatalError" in event or "FatalError" in event:
                failures += 1
            finished = event.get("ScenarioFinished")
            if not finished:
                continue
            recorder = finished.get("recorder") or {}
            requests += sum(
                1
                for interaction in (recorder.get("interactions") or {}).values()
                if interaction.get("response") is not None
            )
            for checks in (recorder.get("checks") or {}).values():
                failures += sum(1 for check in checks if check.get("status") == "failure")
    return requests, failures


if __name__ == "__main__":
    found_requests, found_failures = counts(sys.argv[1])
    print(found_requests, found_failures)
