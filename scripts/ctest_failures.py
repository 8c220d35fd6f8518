#!/usr/bin/env python3
"""The last lines of each failed ctest case's output, from the build's
Testing/Temporary/LastTest.log (test.sh prints them after every suite, so the
end of a long run names what failed and shows why).

    ctest_failures.py BUILD_DIR CTEST_CONSOLE_LOG [LINES]

The failed cases are those the console log lists after "The following tests
FAILED:" (LastTestsFailed.log can be a stale run's).
"""
import os
import re
import sys


def failed_names(console):
    names, listing = [], False
    with open(console, errors="replace") as f:
        for line in f:
            if line.startswith("The following tests FAILED:"):
                listing = True
                continue
            m = re.match(r"^\s+\d+ - (\S+) \(", line)
            if listing and m:
                names.append(m.group(1))
            elif listing and line.strip():
                listing = False
    return names


def outputs(tmp):
    """{test name: its output lines} from LastTest.log."""
    path = os.path.join(tmp, "LastTest.log")
    found = {}
    if not os.path.exists(path):
        return found
    name, lines, inside = None, [], False
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^\d+/\d+ Test: (\S+)$", line.rstrip("\n"))
            if m:
                name, lines, inside = m.group(1), [], False
            elif name and line.startswith("Output:"):
                inside = True
            elif inside and line.startswith("<end of output>"):
                found[name] = lines[1:] if lines and lines[0].startswith("---") else lines
                inside = False
            elif inside:
                lines.append(line.rstrip("\n"))
    return found


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    build, console = sys.argv[1], sys.argv[2]
    keep = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    tmp = os.path.join(build, "Testing", "Temporary")
    names = failed_names(console)
    if not names:
        return 0
    out = outputs(tmp)
    for name in names:
        lines = out.get(name, [])
        print(f"=== failed: {name} (its last {min(keep, len(lines))} of {len(lines)} lines)")
        for line in lines[-keep:]:
            print("  " + line[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
