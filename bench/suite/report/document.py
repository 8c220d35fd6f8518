"""report.md: the header, the targets table and every section in order."""

import os

from .collectives import (collectives_section, physical_section, stream_section, target_cpu_peers,
                          target_large_gloo, target_mpi, target_physical, target_physical_line,
                          target_process_sets)
from .common import SUITE, load, table
from .e2e import e2e_section, target_e2e
from .fusion import fusion_section, target_fusion, target_per_tensor
from .gpu import gpu_copy_section, gpu_torch_section
from .latency import latency_section, target_latency
from .many_hosts import (many_hosts_section, target_best_peer_2x2, target_no_cliff, target_scaling,
                         target_small_2x2)
from .plots import plots
from .ucx import ucx_targets_section


def header_section(out, recs, meta):
    """The title, the command, the load and what was not measured or failed."""
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
    return L


def targets_section(recs, meta, horovod_ok):
    """The table of issue 8's targets that the results measure."""
    L = []
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
    return L


def horovod_section(out, meta, horovod_ok):
    """How Horovod was built, or why it is left out."""
    L = []
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
    return L


def jobs_section(meta):
    """Every job with its seconds, results and exit status."""
    L = []
    if meta.get("jobs"):
        L.append("## Jobs\n")
        L.append(table(["job", "seconds", "results", "exit"],
                       [[j["label"], j["seconds"], j["results"], j["rc"]] for j in meta["jobs"]]))
        L.append("")
    return L


def write_all(out):
    recs, meta = load(out)
    made = plots(recs, out)
    horovod_ok = any(r.get("system") == "horovod" for r in recs)
    L = header_section(out, recs, meta)
    L += targets_section(recs, meta, horovod_ok)
    L += ucx_targets_section(recs, meta)
    L += stream_section(recs)
    sec = physical_section(recs)
    if sec:
        L.append(sec)
    L += collectives_section(recs, meta, made)
    L += fusion_section(recs, made)
    L += latency_section(recs, made)
    L += e2e_section(recs, made)
    L += many_hosts_section(recs, out)
    L += gpu_copy_section(recs)
    L += gpu_torch_section(recs)
    L += horovod_section(out, meta, horovod_ok)
    L += jobs_section(meta)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(L).rstrip() + "\n")
