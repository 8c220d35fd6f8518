"""report.md: the header, the targets table and every section in order."""

import os

from .collectives import (coll_section, physical_section, target_cpu_peers, target_large_gloo,
                          target_mpi, target_physical, target_physical_line, target_process_sets)
from .common import SUITE, fmt_bytes, fmt_ratio, fmt_us, load, spread, table
from .e2e import e2e_rows, target_e2e
from .fusion import fusion_rows, target_fusion, target_per_tensor
from .gpu import gpu_copy_section, gpu_torch_section
from .latency import latency_table, target_latency
from .many_hosts import (many_hosts_section, target_best_peer_2x2, target_no_cliff, target_scaling,
                         target_small_2x2)
from .plots import plots
from .ucx import ucx_targets_section


def write_all(out):
    recs, meta = load(out)
    made = plots(recs, out)
    horovod_ok = any(r.get("system") == "horovod" for r in recs)
    L = []
    title_kind = "quick check" if meta.get("quick") else "full run"
    L.append(f"# hvd benchmark report ({title_kind}, {meta.get('date', '?')})\n")
    raw = meta.get("results", len(recs))
    L.append(f"Command: `{meta.get('command', 'bench/run_all.py')}` — {raw} results in "
             f"{meta.get('seconds', '?')} s. Load average before {meta.get('load_before', '?')}, "
             f"after {meta.get('load_after', '?')} (the machine has "
             f"{os.cpu_count()} CPUs). Machine and library versions: [machine.md](machine.md). "
             "Method: [docs/benchmarks.md](../../../docs/benchmarks.md).\n")
    if os.path.exists(os.path.join(out, "analysis.md")):
        L.append("**Why targets are missed, and the fixes proposed: [analysis.md](analysis.md).**\n")
    if meta.get("quick"):
        L.append("**Quick mode**: one iteration per size; the figures only show that every part "
                 "runs.\n")
    if meta.get("skipped"):
        L.append("Not measured: " + "; ".join(meta["skipped"]) + ".\n")
    if meta.get("failures"):
        L.append("**Failed jobs**:\n")
        for f in meta["failures"]:
            L.append(f"- {f['label']} (exit {f['rc']}): `{f['cmd']}`\n\n```\n{f['tail']}\n```")
        L.append("")

    # Targets
    targets = [t for t in (target_large_gloo(recs), target_mpi(recs), target_physical(recs),
                           target_physical_line(recs), target_cpu_peers(recs, meta),
                           target_fusion(recs), target_per_tensor(recs),
                           target_latency(recs, horovod_ok), target_e2e(recs),
                           target_scaling(recs), target_best_peer_2x2(recs),
                           target_no_cliff(recs), target_small_2x2(recs),
                           target_process_sets(recs))
               if t]
    if targets:
        L.append("## Targets (issue 8)\n")
        L.append(table(["target", "measured", "status"], [list(t) for t in targets],
                       ["---", "---", "---"]))
        L.append("")
    L += ucx_targets_section(recs, meta)

    # Memory reference
    st = [r for r in recs if r.get("kind") == "stream"]
    if st:
        L.append("## Memory bandwidth (the physical reference)\n")
        L.append(f"STREAM-like kernels on double arrays of {st[0]['array_mib']} MiB each, best of "
                 f"{st[0]['reps']} (median in brackets), GB/s.\n")
        kern = ["copy", "triad", "add"]
        thr = sorted({r["threads"] for r in st})
        rows = []
        for k in kern:
            row = [{"copy": "copy c = a", "triad": "triad a = b + s·c", "add": "a += b"}[k]]
            for t in thr:
                r = next((x for x in st if x["variant"] == k and x["threads"] == t), None)
                row.append(f"{r['best_gbs']:.1f} ({r['median_gbs']:.1f})" if r else "–")
            rows.append(row)
        L.append(table(["kernel"] + [f"{t} thread{'s' if t > 1 else ''}" for t in thr], rows))
        L.append("")

    sec = physical_section(recs)
    if sec:
        L.append(sec)

    # Collectives
    colls = [r for r in recs if r.get("kind") == "coll"]
    if colls:
        L.append("## Collectives\n")
        L.append("nccl-tests conventions: float32; allreduce busbw = bytes/time × 2(n−1)/n; "
                 "allgather counts the whole output and busbw = bytes/time × (n−1)/n; broadcast "
                 "busbw = bytes/time. Each iteration starts after the system's own barrier; the "
                 "time of an iteration is its slowest rank's; the table shows the median "
                 "iteration. All ranks on this host (loopback TCP for Gloo, shared memory for "
                 "Open MPI; hvd over UCX: UCX's shared memory with `HVD_SHM=0`, loopback tcp with "
                 "`UCX_TLS=tcp,self` as well).\n")
        pv = meta.get("peer_versions") or {}
        peers = []
        if any(r.get("system") == "oneccl" for r in colls):
            peers.append(f"oneCCL {pv.get('oneCCL', '?')} (its C++ API, launched with Intel MPI "
                         f"{pv.get('Intel MPI (impi-rt)', '?')}'s mpiexec.hydra, ATL/MPI, "
                         "I_MPI_FABRICS=shm)")
        if any(r.get("system") == "deepspeed-shm" for r in colls):
            peers.append(f"DeepSpeed {pv.get('DeepSpeed', '?')} shm = "
                         "`deepspeed.comm.inference_all_reduce` (its CPU shared-memory kernel, "
                         "allreduce only), launched with DeepSpeed's launcher")
        if peers:
            L.append("CPU peers: " + "; ".join(peers) + ". They busy-poll: with more ranks than "
                     "cores every call waits for the scheduler.\n")
        for op in ("allreduce", "allgather", "broadcast"):
            for n in sorted({r["ranks"] for r in colls if r["op"] == op}):
                sec = coll_section(recs, op, n)
                if sec:
                    L.append(sec)
            if f"busbw_{op}.png" in made:
                L.append(f"![busbw {op}](busbw_{op}.png)\n")

    # Fusion
    fus = [r for r in recs if r.get("kind") == "fusion"]
    if fus:
        L.append("## Tensor Fusion\n")
        L.append("N tensors submitted at once, 2 ranks, in place, float32 SUM. hvd: every tensor "
                 "submitted with hvd_allreduce_async, then all waited for (the core fuses them). "
                 "Peers: one blocking call per tensor (`separate`), or packed by hand into one "
                 "buffer, one allreduce, unpacked (`handfused`, copies included). Median step; where the "
                 "job ran several times, the median run and the range over the runs.\n")
        for nt in sorted({r["tensors"] for r in fus}):
            rows = fusion_rows(recs, nt)
            sep = [v for k, v in rows.items() if k.startswith("gloo:separate")]
            sep_best = min(sep, key=lambda r: r["time_us"]) if sep else None
            hf = rows.get("mpi:handfused")
            tb = next(iter(rows.values()))["tensor_bytes"]
            L.append(f"### {nt} × {fmt_bytes(tb)} ({fmt_bytes(nt * tb)} in all)\n")
            trs = []
            for k in sorted(rows, key=lambda k: rows[k]["time_us"]):
                r = rows[k]
                trs.append([k, fmt_us(r["time_us"]) + spread(r, fmt_us), fmt_us(r["time_us"] / nt),
                            fmt_ratio(sep_best["time_us"] / r["time_us"]) if sep_best else "–",
                            fmt_ratio(r["time_us"] / hf["time_us"]) if hf else "–"])
            L.append(table(["system:variant", "step", "per tensor",
                            "speed-up vs fastest separate raw Gloo", "time ÷ hand-fused MPI"], trs))
            L.append("")
        if "fusion.png" in made:
            L.append("![fusion](fusion.png)\n")

    # Latency
    rows, _ = latency_table(recs)
    if rows:
        L.append("## Small-tensor latency\n")
        L.append("One 4-byte allreduce per step, back to back (a training loop's steady state: "
                 "the response cache hits), 2 ranks, median step of the slower rank. Overhead = "
                 "hvd's step − the raw transport's (raw Gloo's faster variant for hvd over Gloo, "
                 "raw MPI for hvd over MPI); target: ≤ cycle time + 50 µs. Raw UCX: "
                 "`ucx_perftest -t tag_lat` (a tag-matching ping-pong between two processes of "
                 "this host; its median over the last 2,048 iterations, one way = half the round "
                 "trip, as it prints it) over tcp and over UCX's shared memory; hvd over UCX's "
                 "overhead is its step − ucx_perftest's 4-byte latency on the same UCX "
                 "transport, shown without a limit (a one-way latency, not an allreduce).\n")
        L.append(table(["system", "cycle time", "step", "overhead", "limit", "within"], rows))
        L.append("")
        if "latency.png" in made:
            L.append("![latency](latency.png)\n")

    # End to end
    by = e2e_rows(recs)
    if by:
        L.append("## End to end\n")
        L.append("Training steps of a PyTorch model on random data, samples/s over all ranks "
                 "(step time in brackets, with its range over the repetitions); every process "
                 "uses cpu_count / local_size threads. The median repetition is shown.\n")
        order = ["single", "hvd", "ddp", "horovod"]
        names = {"single": "1 process", "hvd": "hvd, 2 processes", "ddp": "DDP (gloo), 2 processes",
                 "horovod": "Horovod, 2 processes"}
        rows = []
        for model, d in sorted(by.items()):
            p = next(iter(d.values()))
            row = [f"{model} ({p['params'] / 1e6:.2f} M params, {p['tensors']} tensors, batch "
                   f"{p['batch']}/rank)"]
            for k in order:
                row.append(f"{d[k]['samples_per_s']:.0f} ({d[k]['step_ms']:.1f} ms"
                           + (f", {d[k]['rep_lo']:.1f}–{d[k]['rep_hi']:.1f}" if "reps" in d[k] else "")
                           + ")" if k in d else "–")
            row.append(fmt_ratio(d["ddp"]["step_ms"] / d["hvd"]["step_ms"])
                       if "hvd" in d and "ddp" in d else "–")
            # hvd against the faster of the 2-process peers (the "best peer per row")
            peers = [k for k in ("ddp", "horovod") if k in d]
            if "hvd" in d and peers:
                best = min(peers, key=lambda k: d[k]["step_ms"])
                row.append(f"{fmt_ratio(d[best]['step_ms'] / d['hvd']['step_ms'])} ({names[best].split(',')[0]})")
            else:
                row.append("–")
            rows.append(row)
        L.append(table(["model"] + [names[k] for k in order]
                       + ["hvd speed ÷ DDP", "hvd speed ÷ best peer"], rows))
        L.append("")
        if "e2e.png" in made:
            L.append("![end to end](e2e.png)\n")

    L += many_hosts_section(recs, out)
    L += gpu_copy_section(recs)
    L += gpu_torch_section(recs)

    # Horovod
    hb = os.path.join(out, "horovod_build.md")
    if not os.path.exists(hb):  # the record of the last build attempt, kept with the suite
        hb = os.path.join(SUITE, "horovod_build.md")
    L.append("## Horovod\n")
    if horovod_ok:
        origin = meta.get("horovod") or "(version and folder not recorded)"
        L.append(f"Horovod was importable and is measured above: {origin}. How it was built "
                 "(Horovod 0.28.1 as released does not build against this torch):\n")
    if os.path.exists(hb):
        with open(hb) as f:
            L.append(f.read().strip() + "\n")
    elif not horovod_ok:
        L.append("`import horovod.torch` failed: Horovod is not installed here, so it is left out.\n")

    # Jobs
    if meta.get("jobs"):
        L.append("## Jobs\n")
        L.append(table(["job", "seconds", "results", "exit"],
                       [[j["label"], j["seconds"], j["results"], j["rc"]] for j in meta["jobs"]]))
        L.append("")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(L).rstrip() + "\n")
