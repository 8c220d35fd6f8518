"""Many hosts (run_all.py --parts cluster, bench/suite/cluster_bench.py): the
collectives across simulated hosts, the bytes on their links, and the training step's scaling."""

import json
import os

from .common import busbw, fmt_bytes, fmt_gbs, fmt_ratio, fmt_us, ratio, table


def _lowbit(x):
    return x & -x


def cross_bytes(op, nbytes, hosts, per_host, hier):
    """(algorithm, bytes all hosts send across their links per operation) for hvd's choice
    (docs/transports.md, "Algorithm selection"); ranks fill the hosts in order."""
    H, L = hosts, per_host
    n = H * L
    S = float(nbytes)
    if H < 2:
        return "one host", 0.0
    if op == "allreduce":
        if hier:  # cross groups of H ranks, each on S/L; only this step crosses
            if S / L <= (64 << 10) / (H - 1):
                return "hier: direct across hosts", H * (H - 1) * S
            return "hier: ring across hosts", 2.0 * (H - 1) * S
        if S <= (64 << 10) / (n - 1):
            return "direct", n * (n - L) * S
        return "ring", H * 2.0 * (n - 1) / n * S  # H of the ring's n links cross
    if op == "allgather":
        if hier and nbytes >= 64 << 10:
            return "hier: leaders' ring", (H - 1) * S
        return "ring" + (" (flat below 64 KiB)" if hier else ""), H * (n - 1) / n * S
    if op == "broadcast":
        if hier:
            return "hier: across hosts, then within", (H - 1) * S
        if n <= 2 or nbytes <= 1 << 20:  # binomial tree from rank 0
            crossing = sum(1 for r in range(1, n) if (r - _lowbit(r)) // L != r // L)
            return "tree", crossing * S
        return "chain", (H - 1) * S
    return "?", None


def fmt_size(b):
    if b is None:
        return "–"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"


def mh_time(r):
    """The fastest run's median iteration (the merged record's rep_lo)."""
    return r.get("rep_lo", r["time_us"]) if r else None


def mh_busbw(r):
    if not r:
        return None
    return busbw(dict(r, time_us=mh_time(r)))


def mh_cell(r):
    if not r:
        return "–"
    return f"{fmt_us(mh_time(r))} ({fmt_gbs(mh_busbw(r))})"


MH_PEERS = {"gloo": "raw Gloo", "mpi": "raw MPI", "torch": "torch.distributed"}
# The scaling step's systems and their short names: hvd first, then its peers.
MH_E2E = {"hvd-gloo": "hvd (gloo)", "hvd-ucx": "hvd (ucx)", "hvd-mpi": "hvd (mpi)",
          "torch": "torch"}
MH_E2E_HVD = ("hvd-gloo", "hvd-ucx", "hvd-mpi")


def mh_rate(x):
    return "unshaped" if x == "none" else f"{x}/s"


def mh_e2e(recs):
    """{(system, rate, hosts): record} of the many-hosts training steps."""
    return {(r["system"], r["rate"], r["hosts"]): r for r in recs
            if r.get("kind") == "cluster_e2e_synth"}


def mh_scaling(by, system, rate, hosts):
    """One system's step on `hosts` hosts: step (ms, the fastest run's median), images/s, scaling
    efficiency against its own 1-host step (None without it) and bytes sent per host per step
    (None without counters); None when not measured."""
    r = by.get((system, rate, hosts))
    if not r:
        return None
    step = r.get("rep_lo", r["step_ms"])
    ips = r["ranks"] * r["batch"] / (step / 1e3) if step > 0 else 0
    one = by.get((system, rate, 1))
    eff = None
    if one:
        s1 = one.get("rep_lo", one["step_ms"])
        ips1 = one["batch"] / (s1 / 1e3) if s1 > 0 else 0
        eff = ips / (hosts * ips1) if ips1 > 0 else None
    sent = r["net_tx_per_op"] / r["net_hosts"] if r.get("net_hosts") and "net_tx_per_op" in r else None
    return dict(step=step, ips=ips, eff=eff, sent=sent)


def target_scaling(recs):
    """Many hosts: hvd's scaling efficiency on 2 and 4 hosts ≥ every peer's, at every link: hvd's
    best transport plugin counts (a user picks it with --transport), each one's is shown."""
    by = mh_e2e(recs)
    name = ("Many hosts: hvd's scaling efficiency (ResNet-50 step, 2 and 4 hosts, every link) "
            "≥ every peer measured")
    parts, ok = [], True
    for rate in dict.fromkeys(k[1] for k in by):
        for h in sorted({k[2] for k in by if k[1] == rate and k[2] > 1}):
            mine = [(p, mh_scaling(by, p, rate, h)) for p in MH_E2E_HVD]
            mine = [(p, x) for p, x in mine if x and x["eff"] is not None]
            peers = [(p, mh_scaling(by, p, rate, h)) for p in MH_E2E if p not in MH_E2E_HVD]
            peers = [(p, x) for p, x in peers if x and x["eff"] is not None]
            if not mine or not peers:
                continue
            best = max(x["eff"] for _, x in mine)
            parts.append(f"{mh_rate(rate)}, {h} hosts: "
                         + ", ".join(f"{MH_E2E[p]} {x['eff'] * 100:.1f} %" for p, x in mine) + " vs "
                         + ", ".join(f"{MH_E2E[p]} {x['eff'] * 100:.1f} %" for p, x in peers))
            ok = ok and all(best >= x["eff"] for _, x in peers)
    if not by:
        return None
    if not parts:
        return (name, "not measured: no peer's step on several hosts", "not measured")
    return (name, "; ".join(parts), "met" if ok else "missed")


def mh_cliff(recs):
    """[(rate, size, (system, 2x1 time), (system, 2x2 time), 2x1 ÷ 2x2)]: hvd's fastest
    allreduce on 2 hosts × 1 rank against its fastest on 2 × 2 (every transport and
    hierarchy setting), at 1 MiB and up."""
    coll = [r for r in recs if r.get("kind") == "cluster_coll" and r.get("op") == "allreduce"
            and r["system"].startswith("hvd-") and r["bytes"] >= 1 << 20]
    out = []
    for rate in dict.fromkeys(r["rate"] for r in coll):
        for size in sorted({r["bytes"] for r in coll if r["rate"] == rate and r["layout"] == "2x1"}):
            def best(layout):
                rs = [r for r in coll if r["rate"] == rate and r["bytes"] == size and r["layout"] == layout]
                r = min(rs, key=mh_time) if rs else None
                return (r["system"], mh_time(r)) if r else None
            one, two = best("2x1"), best("2x2")
            if one and two and two[1] > 0:
                out.append((rate, size, one, two, one[1] / two[1]))
    return out


def target_no_cliff(recs):
    """Many hosts: 2 × 2 at ≥ 1 MiB ≥ 0.9× hvd's own 2 × 1 (no multi-node cliff)."""
    rows = mh_cliff(recs)
    if not rows:
        return None
    name = "Many hosts, no cliff: hvd's allreduce on 2 × 2 at ≥ 1 MiB ≥ 0.9× its own 2 × 1 (time)"
    parts = [f"{mh_rate(rate)} {fmt_bytes(size)}: 2x1 {fmt_us(one[1])} ({one[0][4:]}), 2x2 "
             f"{fmt_us(two[1])} ({two[0][4:]}) = {ratio:.2f}×" for rate, size, one, two, ratio in rows]
    ok = all(ratio >= 0.9 for *_, ratio in rows)
    return (name, "; ".join(parts), "met" if ok else "missed")


def target_best_peer_2x2(recs):
    """Many hosts: hvd's allreduce on 2 × 2 at ≥ 1 MiB ≥ 1.0× the best peer (time)."""
    coll = [r for r in recs if r.get("kind") == "cluster_coll" and r.get("op") == "allreduce"
            and r["layout"] == "2x2" and r["bytes"] >= 1 << 20]
    if not coll:
        return None
    parts, ok = [], True
    for rate in dict.fromkeys(r["rate"] for r in coll):
        for size in sorted({r["bytes"] for r in coll if r["rate"] == rate}):
            rs = [r for r in coll if r["rate"] == rate and r["bytes"] == size]
            mine = [r for r in rs if r["system"].startswith("hvd-")]
            peers = [r for r in rs if not r["system"].startswith("hvd-")]
            if not mine or not peers:
                continue
            m = min(mine, key=mh_time)
            p = min(peers, key=mh_time)
            ratio = mh_time(p) / mh_time(m) if mh_time(m) > 0 else 0
            ok = ok and ratio >= 1.0
            parts.append(f"{mh_rate(rate)} {fmt_bytes(size)}: {m['system'][4:]}"
                         f"{' hier' if m.get('hier') == 1 else ''} {fmt_us(mh_time(m))} vs "
                         f"{MH_PEERS.get(p['system'], p['system'])} {fmt_us(mh_time(p))} = {ratio:.2f}×")
    if not parts:
        return None
    return ("Many hosts: hvd's allreduce on 2 × 2 at ≥ 1 MiB ≥ 1.0× the best peer (time)",
            "; ".join(parts), "met" if ok else "missed")


def target_small_2x2(recs):
    """Many hosts: a 4-byte allreduce on 2 × 2 ≤ 3× raw MPI's (hvd's best setting)."""
    coll = [r for r in recs if r.get("kind") == "cluster_coll" and r.get("op") == "allreduce"
            and r["layout"] == "2x2" and r["bytes"] == 4]
    parts, ok = [], True
    for rate in dict.fromkeys(r["rate"] for r in coll):
        rs = [r for r in coll if r["rate"] == rate]
        mine = [r for r in rs if r["system"].startswith("hvd-")]
        mpi = [r for r in rs if r["system"] == "mpi"]
        if not mine or not mpi:
            continue
        m = min(mine, key=mh_time)
        ref = min(mpi, key=mh_time)
        ratio = mh_time(m) / mh_time(ref) if mh_time(ref) > 0 else 0
        ok = ok and ratio <= 3.0
        parts.append(f"{mh_rate(rate)}: {m['system'][4:]}{' hier' if m.get('hier') == 1 else ''} "
                     f"{fmt_us(mh_time(m))} vs raw MPI {fmt_us(mh_time(ref))} = {ratio:.2f}×")
    if not parts:
        return None
    return ("Many hosts: 4-byte allreduce on 2 × 2 ≤ 3× raw MPI's (hvd's best transport)",
            "; ".join(parts), "met" if ok else "missed")


def many_hosts_section(recs, out):
    info = {}
    path = os.path.join(out, "cluster.json")
    if os.path.exists(path):
        with open(path) as f:
            info = json.load(f)
    coll = [r for r in recs if r.get("kind") == "cluster_coll"]
    e2e = [r for r in recs if r.get("kind") == "cluster_e2e_synth"]
    if not coll and not e2e:
        return []
    L = ["## Many hosts\n"]
    rates = info.get("rates") or sorted({r["rate"] for r in coll + e2e})
    rate_label = {x: mh_rate(x) for x in rates}
    ts = info.get("transports") or []
    peers = [p for p in MH_PEERS if any(r["system"] == p for r in coll)]
    L.append(mh_intro(info, coll, rates, rate_label, ts, peers))
    best = mh_best(coll)
    layouts = [x for x in ("2x2", "4x1") if any(r["layout"] == x for r in coll)]
    L += mh_op_tables(coll, best, rates, rate_label, layouts, ts, peers)
    L += mh_bytes_table(coll, best, rate_label, layouts, ts)
    if e2e:
        L += scaling_section(e2e, rates)
    return L


def mh_intro(info, coll, rates, rate_label, ts, peers):
    """The paragraph that says how the cluster was simulated and what a cell shows."""
    torch_note = ""
    if "torch" in peers:
        torch_note = (" torch.distributed: its gloo backend (torch_bench.py: blocking `all_reduce` "
                      "in place, `all_gather_into_tensor`, `broadcast`), `GLOO_SOCKET_IFNAME=eth0`, "
                      "rendezvous in a FileStore on the shared /tmp, started by hvdrun.")
    return (
        f"`run_all.py --parts cluster`: {info.get('hosts', 4)} simulated hosts on this machine "
        f"(tests/cluster/cluster.sh: a network, UTS, IPC and mount namespace each, a veth to a "
        f"bridge, an sshd; network {info.get('net', '?')}), jobs started by hvdrun (mpirun for raw "
        "MPI) from hvd-h1 over the cluster's ssh. Links: "
        + ", ".join("unshaped (a memory copy through the kernel, no cap)" if x == "none" else
                    f"capped at {x}/s each way on every host's link (tc htb on both ends)"
                    for x in rates)
        + ". Every host shares this machine's CPUs, so what a host's ranks do slows the others'. "
        f"Layouts: 2x2 (2 hosts × 2 ranks) and 4x1 (4 hosts × 1 rank), ranks filling the hosts "
        f"in order; hvd over {', '.join(ts) or '?'}, each with `HVD_HIERARCHICAL=1` (hier) and "
        "`=0` (flat). Peers: raw Gloo (gloo-bench, its faster of `gloo::allreduce` and "
        "`AllreduceRing`) and raw Open MPI (mpi-bench, its faster of in-place and out-of-place), "
        "Open MPI with `mpi_yield_when_idle=1`." + torch_note + " Runs of each job: "
        + ", ".join(f"{max([r.get('reps', 1) for r in coll if r['rate'] == x] or [1])} "
                    f"({rate_label[x]})" for x in rates)
        + "; a cell is the fastest run's "
        "median iteration, busbw in GB/s in brackets (nccl-tests conventions, as above). "
        "hier ÷ flat is hier's busbw over flat's (≥ 1: the hierarchy is faster).\n")


def mh_best(coll):
    """The fastest run of every (rate, layout, system, hier, op, size)."""
    def key(r):
        return (r["rate"], r["layout"], r["system"], r.get("hier", -1), r["op"], r["bytes"])
    best = {}
    for r in coll:
        k = key(r)
        if k not in best or mh_time(r) < mh_time(best[k]):  # raw peers: their faster variant
            best[k] = r
    return best


def mh_op_tables(coll, best, rates, rate_label, layouts, ts, peers):
    """One table per collective: hvd flat and hierarchical against the raw peers."""
    L = []
    for op in ("allreduce", "allgather", "broadcast"):
        sizes = sorted({r["bytes"] for r in coll if r["op"] == op})
        if not sizes:
            continue
        header = ["link", "layout", "size"]
        for t in ts:
            header += [f"hvd-{t} flat", f"hvd-{t} hier", "hier ÷ flat"]
        header += [MH_PEERS[p] for p in peers]
        rows = []
        for rate in rates:
            for lay in layouts:
                for b in sizes:
                    row = [rate_label[rate], lay, fmt_bytes(b)]
                    for t in ts:
                        fl = best.get((rate, lay, f"hvd-{t}", 0, op, b))
                        hi = best.get((rate, lay, f"hvd-{t}", 1, op, b))
                        row += [mh_cell(fl), mh_cell(hi),
                                fmt_ratio(mh_time(fl) / mh_time(hi)) if fl and hi and mh_time(hi) > 0
                                else "–"]
                    for p in peers:
                        row.append(mh_cell(best.get((rate, lay, p, -1, op, b))))
                    if any(c != "–" for c in row[3:]):
                        rows.append(row)
        L.append(f"### {op} across hosts\n")
        L.append(table(header, rows, ["---", "---", "--:"] + ["--:"] * (len(header) - 3)))
        L.append("")
    return L


def mh_bytes_table(coll, best, rate_label, layouts, ts):
    """The bytes each host sent on its link per operation, against the algorithms' theory."""
    L = []
    net = [r for r in coll if "net_tx_per_op" in r and r["system"].startswith("hvd-")]
    if net:
        base = "none" if any(r["rate"] == "none" for r in net) else net[0]["rate"]
        L.append("### Bytes across the hosts' links per operation\n")
        L.append(
            f"What each host sent on its link per operation ({rate_label.get(base, base)} links): the "
            "eth0 counters of every host (hvd-bench --netdev, Ethernet/IP/TCP headers and hvd's own "
            "negotiation included) over the timed iterations, less the same number of barriers "
            "measured alone, averaged over the hosts; in brackets the multiple of the payload "
            "(the buffer; allgather: the whole output). Theory: the minimum that hvd's chosen "
            "algorithm must send across hosts, headers not counted — flat ring allreduce "
            "2(n−1)/n × payload per crossing link (n ranks, one link of the ring leaves each "
            "host), direct (small allreduce) n−L copies per rank; hierarchical: only the step "
            "across hosts crosses (allreduce 2(H−1)/H × payload per host, allgather and broadcast "
            "(H−1)/H). flat ÷ hier: measured bytes of flat over hier (> 1: the hierarchy "
            "saves). The theory is that of the core's algorithms over a plugin's point-to-point "
            "(gloo, ucx); hvd-mpi hands some calls to MPI's own collectives (flat allgather and "
            "broadcast at every size, allreduce below 16 KiB × ranks: docs/transports.md), whose "
            "traffic is Open MPI's choice.\n")
        header = ["op", "layout", "size", "flat: algorithm", "flat: theory", "hier: algorithm",
                  "hier: theory"]
        for t in ts:
            header += [f"hvd-{t} flat", f"hvd-{t} hier", "flat ÷ hier"]
        rows = []
        for op in ("allreduce", "allgather", "broadcast"):
            for lay in layouts:
                for b in sorted({r["bytes"] for r in net if r["op"] == op}):
                    any_ = next((r for r in net if r["op"] == op and r["layout"] == lay
                                 and r["bytes"] == b), None)
                    if any_ is None:
                        continue
                    H, per = any_["hosts"], any_["ranks_per_host"]
                    fa, fb = cross_bytes(op, b, H, per, False)
                    ha, hb_ = cross_bytes(op, b, H, per, True)

                    def cell(v):
                        return "–" if v is None else f"{fmt_size(v)} ({v / b:.2f}×)"
                    row = [op, lay, fmt_bytes(b), fa, cell(fb / H), ha, cell(hb_ / H)]
                    for t in ts:
                        got = {}
                        for h in (0, 1):
                            r = best.get((base, lay, f"hvd-{t}", h, op, b))
                            if r and "net_tx_per_op" in r:
                                got[h] = (r["net_tx_per_op"] - r.get("net_barrier_tx", 0)) / max(
                                    1, r.get("net_hosts", H))
                        row += [cell(got.get(0)), cell(got.get(1)),
                                fmt_ratio(got[0] / got[1]) if got.get(1, 0) > 0 and 0 in got else "–"]
                    rows.append(row)
        L.append(table(header, rows, ["---", "---", "--:", "---", "--:", "---", "--:"]
                       + ["--:"] * (len(header) - 7)))
        L.append("")
    return L


def scaling_section(e2e, rates):
    by = mh_e2e(e2e)
    systems = [x for x in MH_E2E if any(k[0] == x for k in by)]
    p = next((by[k] for k in by if k[0] in MH_E2E_HVD and k[2] == 1), e2e[0])
    grad = p.get("params", 0) * 4
    L = ["### Scaling: a ResNet-50-sized training step on 1, 2 and 4 hosts\n"]
    L.append(
        f"hvd-bench e2e: ResNet-50's {p.get('tensors', '?')} gradient tensors "
        f"({p.get('params', 0) / 1e6:.2f} M float32 parameters, {fmt_size(grad)}), averaged "
        f"with hvd_allreduce_async as each one's share of a {p.get('compute_ms', '?')} ms "
        "\"compute\" step ends (a third forward, the rest backward, last layer first; the "
        "compute is slept, not spun, so that hosts sharing this machine's 2 cores do not slow "
        "each other's compute: the step measures what communication adds). One rank per "
        f"host, over each transport plugin, batch {p.get('batch', 32)} per rank; the fastest "
        "run's median step.")
    t = next((r for r in e2e if r["system"] == "torch"), None)
    if t:
        L[-1] += (
            " torch (torch.distributed, gloo): the same step, its gradients averaged as "
            "DistributedDataParallel's Reducer does it — each divided by the world size as its "
            "share ends, into its bucket (DDP's own bucket assignment after its first step: "
            f"{fmt_size(1 << 20)} first, then {fmt_size(t.get('bucket_cap', 25 << 20))}; "
            f"{t.get('buckets', '?')} buckets, gradients as views into them), each bucket's "
            "`all_reduce(async_op=True)` started as soon as its last gradient is in; the step "
            "ends when all are done.")
    L[-1] += (" Scaling efficiency = a system's images/s on N hosts ÷ (N × its images/s on 1 "
              "host). Sent: what each host sent per step (eth0), against a ring allreduce's "
              "2(N−1)/N × the gradients.\n")
    header = ["link", "hosts"]
    for x in systems:
        header += [f"{MH_E2E[x]} {c}" for c in ("step", "images/s", "efficiency", "sent")]
    rows = []
    for rate in rates:
        for h in sorted({k[2] for k in by if k[1] == rate}):
            row = [mh_rate(rate), h]
            for x in systems:
                m = mh_scaling(by, x, rate, h)
                row += ["–"] * 4 if not m else [
                    f"{m['step']:.1f} ms", f"{m['ips']:.0f}",
                    f"{m['eff'] * 100:.0f} %" if m["eff"] is not None else "–",
                    fmt_size(m["sent"]) if m["sent"] is not None else "–"]
            rows.append(row + [fmt_size(2.0 * (h - 1) / h * grad)])
    L.append(table(header + ["ring minimum"], rows, ["---", "--:"] + ["--:"] * (len(header) - 1)))
    L.append("")
    return L
