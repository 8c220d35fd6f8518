"""Worker side of the multi-process tests: run named checks, record each
one's outcome in $HVD_TEST_OUT/rank<r>.json ({check: null | traceback})."""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class Checks(list):
    """The (name, fn) pairs run_checks takes; ``@checks.add("name")`` appends fn."""

    def add(self, name):
        def deco(fn):
            self.append((name, fn))
            return fn
        return deco


def run_checks(checks, rank, extra=None):
    """checks: list of (name, fn). A failing check is recorded, not raised, so
    one bad check does not hide the others (collectives stay in step because
    every check submits its operations before asserting)."""
    results = {}
    for name, fn in checks:
        try:
            fn()
            results[name] = None
        except BaseException:  # noqa: B902 - recorded for the test to report
            results[name] = traceback.format_exc()
    out = {"checks": results}
    out.update(extra or {})
    write(rank, out)
    return results


def write(rank, obj):
    path = os.path.join(os.environ["HVD_TEST_OUT"], f"rank{rank}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)
