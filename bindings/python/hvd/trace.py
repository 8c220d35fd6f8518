"""Reads the flight recorder's files (rank-<r>.json, docs/flight-recorder.md)
and says in a few lines what the ranks were doing: which rank failed first
and whether the others agree on the cause, which ranks never submitted which
tensor, which rank is behind and in which operation, and where the ranks'
sequences of operations diverge.

    python -m hvd.trace DIR [--json]

Pure Python (the standard library only): it runs where the files were
collected, with no framework and no hvd library.
"""

import argparse
import glob
import json
import os
import re
import sys

_RANK_RE = re.compile(r"\brank (\d+)")
_UNFINISHED = ("submitted", "negotiated", "running")


def load(folder):
    """{rank: record} of the files in folder, and the notes on files that
    could not be read."""
    records, notes = {}, []
    for path in sorted(glob.glob(os.path.join(folder, "rank-*.json"))):
        try:
            with open(path) as f:
                rec = json.load(f)
            if rec.get("format") != "hvd-flight-recorder":
                raise ValueError("not a flight record")
            records[int(rec["rank"])] = rec
        except (OSError, ValueError, KeyError, TypeError) as e:
            notes.append(f"{os.path.basename(path)}: unreadable ({e})")
    return records, notes


def _who(rec):
    return f"rank {rec['rank']} (host {rec.get('host') or '?'})"


def _op(o):
    where = "" if o.get("set", -1) < 0 else f" in set {o['set']}"
    return f"{o['op']} '{o['name']}' (#{o['set_seq']}{where})"


def _ranks(rs):
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def _members(rec, set_id):
    for s in rec.get("sets", []):
        if s["id"] == set_id:
            return s["ranks"]
    return []


def _cause(text):
    """The rank an error text blames: the last one it names. A relayed error
    names the rank that reported it first and the cause last ("rank 2: rank 1
    died"; "rank 2 ... is itself blocked: rank 1 has not answered")."""
    found = _RANK_RE.findall(text or "")
    return int(found[-1]) if found else None


class Analysis:
    """What the records say; `facts` is the same as a dict (--json)."""

    def __init__(self, records, notes=()):
        self.records = records
        self.lines = list(notes)
        self.facts = {}
        self.size = max((r.get("size", 0) for r in records.values()), default=0)
        self.t0 = None
        self._run()

    def _t(self, ns):
        if ns is None or self.t0 is None:
            return "?"
        return f"{(ns - self.t0) / 1e9:+.3f} s"

    def _run(self):
        recs = self.records
        if not recs:
            self.lines.append("no flight records found")
            return
        missing = [r for r in range(self.size) if r not in recs]
        self.facts["missing"] = missing
        fails = sorted((r["failure"]["at_ns"] or 0, k) for k, r in recs.items() if r.get("failure"))
        self.t0 = fails[0][0] if fails and fails[0][0] else min(r["written_ns"] for r in recs.values())
        self.lines.append(
            f"{len(recs)} of {self.size} ranks left a record"
            + (f"; none from {_ranks(missing)} (killed, or never got to write it?)" if missing else "")
            + f"; times below are relative to {'the first failure' if fails else 'the first dump'}")
        self._first_failure(fails)
        self._never_submitted()
        self._behind()
        self._divergence()

    def _first_failure(self, fails):
        recs = self.records
        if not fails:
            errs = sorted((o["finished_ns"], k, o) for k, r in recs.items() for o in r["ops"]
                          if o["state"] == "error")
            if errs:
                ns, k, o = errs[0]
                self.lines.append(f"first error: {_who(recs[k])} {_op(o)} at {self._t(ns)}: "
                                  f"{o.get('error', '')}")
                self.facts["first_failure"] = {"rank": k, "error": o.get("error", ""),
                                               "cause": _cause(o.get("error"))}
            return
        at, k = fails[0]
        first = recs[k]["failure"]
        self.lines.append(f"first failure: {_who(recs[k])} at {self._t(at)}: {first['error']}")
        causes = {kk: _cause(recs[kk]["failure"]["error"]) for _, kk in fails}
        named = sorted({c for c in causes.values() if c is not None})
        self.facts["first_failure"] = {"rank": k, "error": first["error"],
                                       "cause": causes[k], "causes": causes}
        if len(named) == 1 and all(c is not None for c in causes.values()):
            self.lines.append(f"every failed rank ({_ranks(causes)}) names rank {named[0]}")
        elif named:
            self.lines.append("the failed ranks name different ranks: " + "; ".join(
                f"rank {kk}: {'rank ' + str(c) if c is not None else 'none'}"
                for kk, c in sorted(causes.items())))

    def _stuck(self, rec):
        return [o for o in rec["ops"] if o["state"] in _UNFINISHED or o["state"] == "error"]

    def _never_submitted(self):
        recs = self.records
        found = {}  # (set, name) -> {"by": set(ranks), "missing": set(ranks), "op": o, "since": ns}
        for a, rec in recs.items():
            for o in self._stuck(rec):
                key = (o["set"], o["name"])
                for r in _members(rec, o["set"]):
                    if r == a or r not in recs:
                        continue
                    other = recs[r]
                    if other["written_ns"] < o["submitted_ns"]:
                        continue  # r's record is older than this submit
                    if any(p["set"] == o["set"] and p["name"] == o["name"] and
                           (p["state"] != "ok" or p["set_seq"] >= o["set_seq"])
                           for p in other["ops"]):
                        continue
                    f = found.setdefault(key, {"by": set(), "missing": set(), "op": o,
                                               "since": o["submitted_ns"]})
                    f["missing"].add(r)
                    f["since"] = min(f["since"], o["submitted_ns"])
                if key in found:
                    found[key]["by"].add(a)
        self.facts["never_submitted"] = [
            {"set": s, "name": n, "ranks": sorted(f["missing"]), "submitted_by": sorted(f["by"])}
            for (s, n), f in sorted(found.items(), key=lambda kv: kv[1]["since"])]
        for (s, n), f in sorted(found.items(), key=lambda kv: kv[1]["since"])[:5]:
            self.lines.append(
                f"{_ranks(f['missing'])} never submitted {f['op']['op']} '{n}'"
                + ("" if s < 0 else f" (set {s})")
                + f"; {_ranks(f['by'])} submitted it at {self._t(f['since'])} and waited")
        if len(found) > 5:
            self.lines.append(f"... and {len(found) - 5} more tensors never submitted by some rank")

    @staticmethod
    def _progress(rec, set_id):
        done = [o["set_seq"] for o in rec["ops"] if o["set"] == set_id and o["state"] == "ok"]
        return max(done) + 1 if done else 0

    def _behind(self):
        recs = self.records
        behind = []
        sets = sorted({o["set"] for r in recs.values() for o in r["ops"]})
        for s in sets:
            prog = {k: self._progress(r, s) for k, r in recs.items() if k in _members(r, s) or s < 0}
            if len(set(prog.values())) > 1:
                low = min(prog.values())
                for k in sorted(k for k, p in prog.items() if p == low):
                    behind.append((k, s, f"completed {low} operations"
                                   + ("" if s < 0 else f" of set {s}")
                                   + f", others up to {max(prog.values())}"))
        if not behind:
            for f in self.facts.get("never_submitted", []):
                for k in f["ranks"]:
                    if all(b[0] != k for b in behind):
                        behind.append((k, f["set"], f"never submitted '{f['name']}'"))
        if not behind:
            ff = self.facts.get("first_failure") or {}
            causes = [c for c in (ff.get("causes") or {ff.get("rank"): ff.get("cause")}).values()
                      if c is not None]
            if causes:
                k = max(set(causes), key=causes.count)
                behind.append((k, None, "named by the failed ranks"))
        self.facts["behind"] = []
        for k, s, why in behind[:4]:
            op = self._current(k, s)
            self.facts["behind"].append({"rank": k, "op": op and op["name"], "set": s})
            where = "operation unknown"
            if op:
                steps = [f"{step} {self._t(op.get(step + '_ns'))}"
                         for step in ("submitted", "negotiated", "started") if op.get(step + "_ns")]
                where = ("in " if op["state"] != "ok" else "idle after ") + _op(op) + ": " + \
                    ", ".join(steps + [op["state"]])
            own = "" if k in recs else " (no record of its own: the others' operation)"
            self.lines.append(f"behind: rank {k} ({why}): {where}{own}")

    def _current(self, k, s):
        """Rank k's oldest unfinished (or failed) operation on set s; where k
        left no record, the oldest one the others are stuck in."""
        if k in self.records:
            ops = [o for o in self._stuck(self.records[k]) if s is None or o["set"] == s]
            if ops:
                return min(ops, key=lambda o: o["seq"])
            done = [o for o in self.records[k]["ops"] if s is None or o["set"] == s]
            return max(done, key=lambda o: o["seq"]) if done else None
        stuck = [o for r in self.records.values() for o in self._stuck(r)
                 if (s is None or o["set"] == s) and k in _members(r, o["set"])]
        return min(stuck, key=lambda o: o["submitted_ns"] or 0) if stuck else None

    def _divergence(self):
        recs = self.records
        by = {}  # (set, set_seq) -> {rank: op}
        for k, r in recs.items():
            for o in r["ops"]:
                by.setdefault((o["set"], o["set_seq"]), {})[k] = o
        diverged = {}
        for (s, n), ops in sorted(by.items()):
            if s in diverged or len(ops) < 2:
                continue
            kinds = {(o["op"], o["name"]) for o in ops.values()}
            if len(kinds) > 1:
                diverged[s] = (n, ops)
        self.facts["diverge"] = [{"set": s, "set_seq": n,
                                  "ops": {k: o["name"] for k, o in ops.items()}}
                                 for s, (n, ops) in sorted(diverged.items())]
        for s, (n, ops) in sorted(diverged.items()):
            what = "; ".join(f"rank {k}: {o['op']} '{o['name']}'" for k, o in sorted(ops.items()))
            self.lines.append(f"sequences diverge on {'the context' if s < 0 else 'set ' + str(s)}"
                              f" at operation #{n}: {what}")
        if not diverged and by:
            self.lines.append("the ranks' sequences of operations agree where their records overlap")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hvd.trace",
                                description="Summarise the flight recorder's files in DIR.")
    p.add_argument("dir", help="the folder of rank-<r>.json files (HVD_FLIGHT_RECORDER_DIR, "
                               "hvdrun --flight-recorder)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = p.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"hvd.trace: {args.dir} is not a folder", file=sys.stderr)
        return 2
    records, notes = load(args.dir)
    a = Analysis(records, notes)
    if args.json:
        print(json.dumps(a.facts, indent=1, sort_keys=True, default=str))
    else:
        print("\n".join(a.lines))
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
