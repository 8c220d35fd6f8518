"""The GPU sections: batched copies and the staged allreduce of CUDA tensors."""

from .common import fmt_bytes, fmt_ratio, fmt_us, ratio, table


def gpu_copy_section(recs):
    """run_all.py --parts gpu: the batched copy kernel against cudaMemcpyAsync."""
    cc = [r for r in recs if r.get("kind") == "cudacopy"]
    if not cc:
        return []
    L = ["## GPU: batched copies\n",
         "N float32 tensors of S bytes gathered into one device buffer (a fused allreduce's "
         "copy-in) on one stream: the core's kernel (one launch per batch) against N "
         "`cudaMemcpyAsync` device-to-device calls; `scale` multiplies by 0.125 on the way "
         "(AVERAGE's copy-out). GB/s of data copied; ratio = kernel ÷ memcpy.\n"]
    by = {(r["system"], r["variant"], r["tensors"], r["tensor_bytes"]): r for r in cc}
    rows, worst = [], None
    for (system, variant, n, s) in sorted(k for k in by if k[0] == "cudaMemcpyAsync"):
        m = by[(system, variant, n, s)]
        k = by.get(("hvd-kernel", "copy", n, s))
        ks = by.get(("hvd-kernel", "scale", n, s))
        ratio = k["gbs"] / m["gbs"] if k and m["gbs"] > 0 else None
        if ratio is not None and n >= 64 and 16 << 10 <= s <= 4 << 20:
            worst = ratio if worst is None else min(worst, ratio)
        rows.append([str(n), fmt_bytes(s), f"{m['gbs']:.1f}", f"{k['gbs']:.1f}" if k else "–",
                     f"{ks['gbs']:.1f}" if ks else "–", fmt_ratio(ratio) if ratio else "–"])
    L.append(table(["tensors", "tensor size", "cudaMemcpyAsync GB/s", "kernel GB/s",
                    "kernel, scaled GB/s", "kernel ÷ memcpy"], rows))
    L.append("")
    if worst is not None:
        L.append(f"Target: kernel ≥ 0.8× cudaMemcpyAsync for ≥ 64 tensors of 16 KiB–4 MiB: "
                 f"worst {worst:.2f}× — {'met' if worst >= 0.8 else 'missed'}.\n")
    return L


def gpu_torch_section(recs):
    """run_all.py --parts gpu: hvd.torch on CUDA tensors (gpu_coll_bench.py,
    e2e_bench.py --device cuda)."""
    gc = [r for r in recs if r.get("kind") == "gpu_coll"]
    ge = [r for r in recs if r.get("kind") == "gpu_e2e"]
    if not gc and not ge:
        return []
    L = []
    if gc:
        L += ["## GPU: staged allreduce of CUDA tensors\n",
              "hvd.torch `allreduce_` (SUM, in place) of a CUDA tensor, staged through page-locked "
              "host memory over the host transport, against the same call on a host tensor, in one "
              "job (ranks sharing one GPU, rounds alternating); median time from submit to the "
              "result in place. ratio = host time ÷ CUDA time (1.0: staging costs nothing).\n"]
        by = {}
        for r in gc:
            by.setdefault((r["system"], r["ranks"], r["bytes"]), {})[r["device"]] = r
        rows = []
        for (system, ranks, nbytes) in sorted(by):
            d = by[(system, ranks, nbytes)]
            h, c = d.get("host"), d.get("cuda")
            ratio = h["time_us"] / c["time_us"] if h and c and c["time_us"] > 0 else None
            rows.append([system, str(ranks), fmt_bytes(nbytes),
                         fmt_us(h["time_us"]) if h else "–", fmt_us(c["time_us"]) if c else "–",
                         fmt_ratio(ratio) if ratio else "–"])
        L.append(table(["system", "ranks", "size", "host tensor", "CUDA tensor", "host ÷ CUDA"], rows))
        L.append("")
    if ge:
        L += ["## GPU: the example CNN's training step on CUDA\n",
              "e2e_bench.py --device cuda: the example's model and data on the GPU, 1 process, and "
              "hvd with 2 processes sharing the GPU (gradients staged over gloo). samples/s of "
              "all ranks together.\n"]
        rows = []
        for r in sorted(ge, key=lambda r: (r["model"], r["ranks"], r["system"])):
            rows.append([r["model"], r["system"], str(r["ranks"]), f"{r['step_ms']:.2f} ms",
                         f"{r['samples_per_s']:.0f}"])
        L.append(table(["model", "system", "processes", "step", "samples/s"], rows))
        L.append("")
    return L
