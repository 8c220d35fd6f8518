"""Gradients of hvd.tensorflow's collectives under tf.GradientTape on N ranks
(2 and 3), eagerly and inside a tf.function (hvd's kernels), and within a
process set at N = 3. Every check takes L = sum(c_r * y) on rank r, with
coefficients c_r that differ by rank (so dL/dy = c_r), and compares dL/dx with
Horovod's definitions computed here in numpy from every rank's c and x
(within 1e-12 of the largest magnitude for float64, 1e-6 for float32; the
averages are the only rounding):

  allgather, grouped_allgather   rank r's rows of mean_q c_q
  reducescatter (+ grouped)      allgather of c (x size for Sum, x prescale x
                                 postscale)
  grouped_allreduce              sum_q c_q (Sum) or mean_q c_q (Average)
  broadcast                      mean_q c_q on the root, zeros elsewhere
  alltoall                       the parts of c_j that came from rank r, sent
                                 back (splits differ by rank)

Ranks have different first dimensions where the op allows it (allgather:
r + 1 rows; grouped members of different shapes and dtypes)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHECKS = ["allgather", "grouped_allgather", "reducescatter", "grouped_reducescatter",
          "grouped_allreduce", "broadcast", "alltoall", "no_gradient_for_ints",
          "process_set"]


def coeff(r, shape, seed):
    """Rank r's dL/dy: small integers (exact in float64), distinct per rank."""
    n = int(np.prod(shape))
    return (((np.arange(n) * (seed + 3) + 7 * r + seed) % 11) - 5.0).reshape(shape)


def inputs(r, shape, seed):
    n = int(np.prod(shape))
    return (np.arange(n) * 0.25 + r + seed).reshape(shape)


def close(got, want, what):
    tol = 1e-6 if np.asarray(got).dtype == np.float32 else 1e-12
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    assert err <= tol * scale, f"{what}: max error {err}\ngot {got}\nwant {want}"


def main():
    import tensorflow as tf
    import hvd.tensorflow as htf
    from common import run_checks

    htf.init()
    size, rank = htf.size(), htf.rank()
    modes = [("eager", lambda f: f), ("function", lambda f: tf.function(f, jit_compile=False))]

    def grads_of(fn, xs, cs, wrap):
        """dL/dxs for L = sum_i sum(cs[i] * fn(xs)[i])."""
        def body(*vals):
            with tf.GradientTape() as tape:
                for v in vals:
                    tape.watch(v)
                ys = fn(list(vals))
                loss = tf.add_n([tf.cast(tf.reduce_sum(tf.cast(c, y.dtype) * y), tf.float64)
                                 for c, y in zip(cs, ys)])
            return tape.gradient(loss, list(vals))
        return [g.numpy() for g in wrap(body)(*[tf.constant(x) for x in xs])]

    def rows(r):
        return r + 1

    def allgather():
        for mode, wrap in modes:
            shapes = [(rows(q), 2) for q in range(size)]
            total = (sum(s[0] for s in shapes), 2)
            cs = [coeff(q, total, 1) for q in range(size)]
            mean = sum(cs) / size
            (g,) = grads_of(lambda v: [htf.allgather(v[0], name=f"ag.{mode}")],
                            [inputs(rank, shapes[rank], 1)], [cs[rank]], wrap)
            start = sum(rows(q) for q in range(rank))
            close(g, mean[start:start + rows(rank)], f"allgather {mode}")

    def grouped_allgather():
        for mode, wrap in modes:
            a_shapes = [(rows(q), 3) for q in range(size)]
            b_shapes = [(2, 2, 2)] * size
            ca = [coeff(q, (sum(s[0] for s in a_shapes), 3), 2) for q in range(size)]
            cb = [coeff(q, (2 * size, 2, 2), 3) for q in range(size)]
            xs = [inputs(rank, a_shapes[rank], 2), inputs(rank, b_shapes[rank], 3).astype(
                np.float32)]
            ga, gb = grads_of(lambda v: htf.grouped_allgather(v, name=f"gag.{mode}"), xs,
                              [ca[rank], cb[rank]], wrap)
            assert gb.dtype == np.float32
            start = sum(rows(q) for q in range(rank))
            close(ga, (sum(ca) / size)[start:start + rows(rank)], f"grouped_allgather a {mode}")
            close(gb, (sum(cb) / size)[2 * rank:2 * rank + 2], f"grouped_allgather b {mode}")

    def blocks(n):
        """reducescatter's rows per rank: the first n % size ranks get one more."""
        return [n // size + (1 if q < n % size else 0) for q in range(size)]

    def reducescatter():
        n = 2 * size + 1
        per = blocks(n)
        for mode, wrap in modes:
            for op, pre, post in ((htf.Sum, 1.0, 1.0), (htf.Average, 1.0, 1.0),
                                  (htf.Sum, 0.5, 3.0)):
                cs = [coeff(q, (per[q], 2), 4) for q in range(size)]
                factor = (size if op == htf.Sum else 1) * pre * post
                tag = f"rs.{mode}.{int(op)}.{pre}"
                (g,) = grads_of(lambda v: [htf.reducescatter(v[0], op=op, name=tag,
                                                             prescale_factor=pre,
                                                             postscale_factor=post)],
                                [inputs(rank, (n, 2), 4)], [cs[rank]], wrap)
                close(g, np.concatenate(cs) * factor, f"reducescatter {tag}")

    def grouped_reducescatter():
        for mode, wrap in modes:
            for op in (htf.Sum, htf.Average):
                na, nb = size + 1, 2 * size
                pa, pb = blocks(na), blocks(nb)
                ca = [coeff(q, (pa[q],), 5) for q in range(size)]
                cb = [coeff(q, (pb[q], 3), 6) for q in range(size)]
                factor = size if op == htf.Sum else 1
                tag = f"grs.{mode}.{int(op)}"
                ga, gb = grads_of(lambda v: htf.grouped_reducescatter(v, op=op, name=tag),
                                  [inputs(rank, (na,), 5), inputs(rank, (nb, 3), 6)],
                                  [ca[rank], cb[rank]], wrap)
                close(ga, np.concatenate(ca) * factor, f"grouped_reducescatter a {tag}")
                close(gb, np.concatenate(cb) * factor, f"grouped_reducescatter b {tag}")

    def grouped_allreduce():
        for mode, wrap in modes:
            for op in (htf.Sum, htf.Average):
                ca = [coeff(q, (3,), 7) for q in range(size)]
                cb = [coeff(q, (2, 2), 8) for q in range(size)]
                tag = f"gar.{mode}.{int(op)}"
                ga, gb = grads_of(lambda v: htf.grouped_allreduce(v, op=op, name=tag),
                                  [inputs(rank, (3,), 7), inputs(rank, (2, 2), 8)],
                                  [ca[rank], cb[rank]], wrap)
                div = size if op == htf.Average else 1
                close(ga, sum(ca) / div, f"grouped_allreduce a {tag}")
                close(gb, sum(cb) / div, f"grouped_allreduce b {tag}")

    def broadcast():
        root = size - 1
        for mode, wrap in modes:
            cs = [coeff(q, (2, 3), 9) for q in range(size)]
            (g,) = grads_of(lambda v: [htf.broadcast(v[0], root, name=f"bc.{mode}")],
                            [inputs(rank, (2, 3), 9)], [cs[rank]], wrap)
            want = sum(cs) / size if rank == root else np.zeros((2, 3))
            close(g, want, f"broadcast {mode}")

    def alltoall():
        # Rank r sends (r + j) % 2 + 1 rows to rank j.
        def send(r):
            return [(r + j) % 2 + 1 for j in range(size)]
        for mode, wrap in modes:
            recv_rows = [sum(send(q)[j] for q in range(size)) for j in range(size)]
            cs = [coeff(j, (recv_rows[j], 2), 10) for j in range(size)]
            x = inputs(rank, (sum(send(rank)), 2), 10)
            (g,) = grads_of(lambda v: [htf.alltoall(v[0], splits=send(rank),
                                                    name=f"a2a.{mode}")[0]],
                            [x], [cs[rank]], wrap)
            # Rank j received the rows of ranks 0..size-1 in rank order; the
            # part from this rank goes back.
            want = []
            for j in range(size):
                start = sum(send(q)[j] for q in range(rank))
                want.append(cs[j][start:start + send(rank)[j]])
            close(g, np.concatenate(want), f"alltoall {mode}")
            # Even split (no splits): rows come back the same way.
            ce = [coeff(j, (2 * size, 2), 11) for j in range(size)]
            (g,) = grads_of(lambda v: [htf.alltoall(v[0], name=f"a2a.even.{mode}")],
                            [inputs(rank, (2 * size, 2), 11)], [ce[rank]], wrap)
            close(g, np.concatenate([ce[j][2 * rank:2 * rank + 2] for j in range(size)]),
                  f"alltoall even {mode}")

    def no_gradient_for_ints():
        x = tf.constant(np.arange(4, dtype=np.int64).reshape(2, 2) + rank)
        got = htf.allgather(x, name="ints").numpy()
        want = np.concatenate([np.arange(4).reshape(2, 2) + q for q in range(size)])
        assert got.tolist() == want.tolist(), got

    def process_set():
        if size < 3:
            return
        ps = htf.add_process_set([0, 2])
        try:
            if not ps.included():
                return
            members = ps.ranks
            for mode, wrap in modes:
                cs = {q: coeff(q, (sum(m + 1 for m in members), 2), 12) for q in members}
                (g,) = grads_of(lambda v: [htf.allgather(v[0], name=f"ps.ag.{mode}",
                                                         process_set=ps)],
                                [inputs(rank, (rank + 1, 2), 12)], [cs[rank]], wrap)
                start = sum(m + 1 for m in members if m < rank)
                mean = sum(cs.values()) / len(members)
                close(g, mean[start:start + rank + 1], f"allgather in {members} {mode}")
                n = 3
                per = [2, 1]
                cr = {q: coeff(q, (per[members.index(q)], 2), 13) for q in members}
                (g,) = grads_of(lambda v: [htf.reducescatter(v[0], op=htf.Sum,
                                                             name=f"ps.rs.{mode}",
                                                             process_set=ps)],
                                [inputs(rank, (n, 2), 13)], [cr[rank]], wrap)
                close(g, np.concatenate([cr[q] for q in members]) * len(members),
                      f"reducescatter in {members} {mode}")
        finally:
            htf.barrier()
            htf.remove_process_set(ps)

    fns = dict(allgather=allgather, grouped_allgather=grouped_allgather,
               reducescatter=reducescatter, grouped_reducescatter=grouped_reducescatter,
               grouped_allreduce=grouped_allreduce, broadcast=broadcast, alltoall=alltoall,
               no_gradient_for_ints=no_gradient_for_ints, process_set=process_set)
    run_checks([(n, fns[n]) for n in CHECKS], rank)
    htf.shutdown()


if __name__ == "__main__":
    main()
