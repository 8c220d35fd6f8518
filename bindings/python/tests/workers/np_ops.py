"""Every numpy collective x every dtype x every op, on N ranks.

Each check's expected value is computed locally from the inputs every rank
would have used. Integers must match exactly; floats within TOL[dtype]."""

import os
import sys

import numpy as np
try:
    from common import Checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import Checks  # imported by a test module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import ml_dtypes  # bfloat16 for numpy (ships with TensorFlow)
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64",
          "bool"] + (["bfloat16"] if BF16 is not None else [])
OPS = ["Sum", "Average", "Min", "Max", "Product"]
# Relative tolerances for floats (results are exact small integers in most
# cases; Average divides): float16 has an 11-bit significand, bfloat16 8 bits.
TOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-6, "float64": 1e-12}


def np_dtype(name):
    return BF16 if name == "bfloat16" else np.dtype(name)


def value(name, r, shape=(2, 3)):
    n = int(np.prod(shape))
    base = np.arange(n).reshape(shape)
    if name == "bool":
        return ((base + r) % 2 == 0)
    if name.startswith("uint"):
        return (base + r).astype(np_dtype(name))
    return (base - 2 + r).astype(np_dtype(name))


def expected_reduce(name, op, size, shape=(2, 3)):
    xs = [value(name, r, shape).astype(np.float64) for r in range(size)]
    if name == "bool":
        b = [x != 0 for x in xs]
        if op in ("Sum", "Max"):
            return np.logical_or.reduce(b)
        return np.logical_and.reduce(b)
    s = np.sum(xs, axis=0)
    if op == "Sum":
        e = s
    elif op == "Average":
        e = np.trunc(s / size) if not is_float(name) else s / size
    elif op == "Min":
        e = np.min(xs, axis=0)
    elif op == "Max":
        e = np.max(xs, axis=0)
    else:
        e = np.prod(xs, axis=0)
    return e.astype(np_dtype(name))


def is_float(name):
    return name in TOL


def check_equal(got, exp, name):
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    if is_float(name):
        np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64),
                                   rtol=TOL[name], atol=TOL[name])
    else:
        np.testing.assert_array_equal(got, exp)


def check_names(size):
    names = []
    for d in DTYPES:
        for op in OPS:
            names.append(f"allreduce[{d}-{op}]")
        names += [f"allreduce_inplace[{d}]", f"allgather[{d}]", f"broadcast[{d}]",
                  f"broadcast_inplace[{d}]", f"alltoall[{d}]", f"reducescatter[{d}]"]
    names += ["allreduce_async", "allreduce_scale", "allreduce_scalar", "allreduce_empty",
              "allreduce_noncontiguous_inplace", "grouped_allreduce", "grouped_allreduce_inplace",
              "allgather_async_zero_copy_result", "alltoall_splits", "alltoall_async",
              "reducescatter_uneven", "barrier", "broadcast_object", "allgather_object",
              "different_order", "mismatch_then_usable", "duplicate_name",
              "wait_timeout_names_ranks", "auto_names",
              "poll_then_synchronize", "dropped_handle"]
    return names


def make_checks(hvd, size, rank):
    checks = Checks()
    add = checks.add

    for d in DTYPES:
        for op in OPS:
            def ar(d=d, op=op):
                x = value(d, rank)
                if d == "bool" and op == "Average":
                    try:
                        hvd.allreduce(x, op=hvd.Average, name=f"ar.{d}.{op}")
                    except hvd.UnsupportedError:
                        return
                    raise AssertionError("bool Average should raise UnsupportedError")
                got = hvd.allreduce(x, op=getattr(hvd, op), name=f"ar.{d}.{op}")
                check_equal(got, expected_reduce(d, op, size), d)
                check_equal(x, value(d, rank), d)  # input untouched
            checks.append((f"allreduce[{d}-{op}]", ar))

        def ar_inplace(d=d):
            x = value(d, rank)
            op = hvd.Max if d == "bool" else hvd.Sum
            ptr = x.ctypes.data
            out = hvd.allreduce_(x, op=op, name=f"ari.{d}")
            assert out is x and x.ctypes.data == ptr
            check_equal(x, expected_reduce(d, "Max" if d == "bool" else "Sum", size), d)
        checks.append((f"allreduce_inplace[{d}]", ar_inplace))

        def ag(d=d):
            x = np.stack([value(d, rank, (3,))] * (rank + 1))  # rank r sends r+1 rows
            got = hvd.allgather(x, name=f"ag.{d}")
            exp = np.concatenate([np.stack([value(d, r, (3,))] * (r + 1)) for r in range(size)])
            check_equal(got, exp, d)
        checks.append((f"allgather[{d}]", ag))

        def bc(d=d):
            root = size - 1
            x = value(d, rank)
            got = hvd.broadcast(x, root, name=f"bc.{d}")
            check_equal(got, value(d, root), d)
            check_equal(x, value(d, rank), d)
        checks.append((f"broadcast[{d}]", bc))

        def bci(d=d):
            x = value(d, rank)
            out = hvd.broadcast_(x, 0, name=f"bci.{d}")
            assert out is x
            check_equal(x, value(d, 0), d)
        checks.append((f"broadcast_inplace[{d}]", bci))

        def a2a(d=d):
            # rank r sends rows [r*size + j] to rank j (even split: one row each)
            x = np.stack([value(d, rank * size + j, (2,)) for j in range(size)])
            got = hvd.alltoall(x, name=f"a2a.{d}")
            exp = np.stack([value(d, r * size + rank, (2,)) for r in range(size)])
            check_equal(got, exp, d)
        checks.append((f"alltoall[{d}]", a2a))

        def rs(d=d):
            rows = 2 * size
            x = value(d, rank, (rows, 2))
            op = "Max" if d == "bool" else "Sum"
            got = hvd.reducescatter(x, op=getattr(hvd, op), name=f"rs.{d}")
            full = expected_reduce(d, op, size, (rows, 2))
            check_equal(got, full[2 * rank:2 * rank + 2], d)
        checks.append((f"reducescatter[{d}]", rs))

    @add("allreduce_async")
    def _():
        hs = [hvd.allreduce_async(np.full(4, rank + i, np.float32), op=hvd.Sum, name=f"async.{i}")
              for i in range(5)]
        for i, h in enumerate(hs):
            got = hvd.synchronize(h)
            exp = sum(r + i for r in range(size))
            np.testing.assert_array_equal(got, np.full(4, exp, np.float32))
        assert all(hvd.poll(h) for h in hs)

    @add("allreduce_scale")
    def _():
        x = np.full(3, rank + 1, np.float64)
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                            name="scale")
        exp = 0.25 * sum(2.0 * (r + 1) for r in range(size))
        np.testing.assert_allclose(got, np.full(3, exp), rtol=1e-12)

    @add("allreduce_scalar")
    def _():
        got = hvd.allreduce(np.float32(rank), op=hvd.Sum, name="scalar")
        assert got.shape == () and float(got) == sum(range(size))
        got = hvd.allreduce(np.array(rank, np.int64), op=hvd.Max, name="scalar0d")
        assert got.shape == () and int(got) == size - 1

    @add("allreduce_empty")
    def _():
        got = hvd.allreduce(np.zeros((0, 3), np.float32), name="empty")
        assert got.shape == (0, 3)

    @add("allreduce_noncontiguous_inplace")
    def _():
        import warnings
        base = np.arange(12, dtype=np.float64).reshape(3, 4) + rank
        view = base[:, ::2]  # strided
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = hvd.allreduce_(view, op=hvd.Sum, name="noncontig")
        assert out is view
        assert any(issubclass(x.category, hvd.PerformanceWarning) for x in w), w
        exp = sum(np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2] + r for r in range(size))
        np.testing.assert_array_equal(base[:, ::2], exp)
        np.testing.assert_array_equal(base[:, 1::2],
                                      (np.arange(12).reshape(3, 4) + rank)[:, 1::2])

    @add("grouped_allreduce")
    def _():
        xs = [np.full((i + 1,), rank + i, np.float32) for i in range(4)]
        got = hvd.grouped_allreduce(xs, op=hvd.Sum, name="group")
        for i, g in enumerate(got):
            np.testing.assert_array_equal(g, np.full((i + 1,), sum(r + i for r in range(size)),
                                                     np.float32))

    @add("grouped_allreduce_inplace")
    def _():
        xs = [np.full((3,), rank + i, np.int32) for i in range(3)]
        out = hvd.grouped_allreduce_(xs, op=hvd.Min, name="groupi")
        assert all(a is b for a, b in zip(out, xs))
        for i, x in enumerate(xs):
            np.testing.assert_array_equal(x, np.full((3,), i, np.int32))

    @add("allgather_async_zero_copy_result")
    def _():
        h = hvd.allgather_async(np.full((2, 2), rank, np.int64), name="agz")
        got = hvd.synchronize(h)
        # the result lives in the handle's memory (no copy): its base chain is
        # the handle's buffer, released when the array goes away
        base = got
        while getattr(base, "base", None) is not None:
            base = base.base
        assert type(base).__name__ == "HandleMemory", type(base)
        np.testing.assert_array_equal(got[:, 0], np.repeat(np.arange(size), 2))

    @add("alltoall_splits")
    def _():
        # rank r sends j+1 rows to rank j, rows valued 100*r + j
        splits = [j + 1 for j in range(size)]
        x = np.concatenate([np.full((j + 1, 2), 100 * rank + j, np.int32) for j in range(size)])
        got, recv = hvd.alltoall(x, splits=splits, name="a2as")
        assert recv.tolist() == [rank + 1] * size, recv
        exp = np.concatenate([np.full((rank + 1, 2), 100 * r + rank, np.int32)
                              for r in range(size)])
        np.testing.assert_array_equal(got, exp)

    @add("alltoall_async")
    def _():
        x = np.arange(size * 2, dtype=np.float32).reshape(size, 2) + 10 * rank
        got = hvd.synchronize(hvd.alltoall_async(x, name="a2aa"))
        exp = np.stack([np.arange(size * 2, dtype=np.float32).reshape(size, 2)[rank] + 10 * r
                        for r in range(size)])
        np.testing.assert_array_equal(got, exp)

    @add("reducescatter_uneven")
    def _():
        rows = 2 * size + 1  # the first (rows % size) ranks get one extra row
        x = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * (rank + 1)
        got = hvd.reducescatter(x, op=hvd.Average, name="rsu")
        full = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * np.mean(
            [r + 1 for r in range(size)])
        counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
        start = sum(counts[:rank])
        np.testing.assert_allclose(got, full[start:start + counts[rank]], rtol=1e-12)

    @add("barrier")
    def _():
        for _ in range(3):
            hvd.barrier()

    @add("broadcast_object")
    def _():
        obj = {"rank": rank, "payload": list(range(rank * 10))}
        got = hvd.broadcast_object(obj, root_rank=size - 1, name="bobj")
        assert got == {"rank": size - 1, "payload": list(range((size - 1) * 10))}
        assert hvd.broadcast_object(None if rank else "x" * 100000, 0) == "x" * 100000

    @add("allgather_object")
    def _():
        got = hvd.allgather_object({"r": rank, "s": "y" * rank})
        assert got == [{"r": r, "s": "y" * r} for r in range(size)]

    @add("different_order")
    def _():
        # ranks submit the same named ops in different orders; names match them
        names = [f"order.{i}" for i in range(6)]
        order = names if rank % 2 == 0 else list(reversed(names))
        if rank == 2:
            order = names[3:] + names[:3]
        hs = {n: hvd.allreduce_async(np.full(2, int(n.split(".")[1]) * (rank + 1), np.int64),
                                     op=hvd.Sum, name=n) for n in order}
        for n in names:
            i = int(n.split(".")[1])
            np.testing.assert_array_equal(hvd.synchronize(hs[n]),
                                          np.full(2, i * sum(r + 1 for r in range(size))))

    @add("mismatch_then_usable")
    def _():
        x = np.zeros(3 + rank, np.float32)  # shapes disagree
        try:
            hvd.allreduce(x, name="mismatch")
        except hvd.MismatchError as e:
            assert e.status == -5
        else:
            raise AssertionError("expected MismatchError")
        got = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="after_mismatch")
        np.testing.assert_array_equal(got, np.full(2, size, np.float32))

    @add("duplicate_name")
    def _():
        # A name is refused only while its first op is in flight. Rank k submits
        # "dup.k" and its duplicate before the barrier, the others after it, so
        # "dup.k" cannot complete (and free its name) before rank k's check.
        handles = []
        for k in range(size):
            name = f"dup.{k}"
            if rank == k:
                handles.append(hvd.allreduce_async(np.ones(2), op=hvd.Sum, name=name))
                try:
                    hvd.allreduce_async(np.ones(2), name=name)
                except hvd.DuplicateNameError:
                    pass
                else:
                    raise AssertionError("expected DuplicateNameError")
            hvd.barrier()
            if rank != k:
                handles.append(hvd.allreduce_async(np.ones(2), op=hvd.Sum, name=name))
        for h in handles:
            np.testing.assert_array_equal(hvd.synchronize(h), np.full(2, size))

    @add("wait_timeout_names_ranks")
    def _():
        # Rank 0 waits, with a limit, on a tensor the others submit only after
        # the barrier: the timeout names the ranks that have not submitted it.
        if rank == 0:
            h = hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="late.x")
            try:
                h.wait(1.5)
            except hvd.HvdTimeoutError as e:
                want = "ranks [" + ", ".join(str(r) for r in range(1, size)) + \
                    "] have not submitted 'late.x'"
                if want not in str(e):
                    raise AssertionError(f"timeout message does not say {want!r}: {e}")
            else:
                raise AssertionError("expected HvdTimeoutError")
            hvd.barrier()
        else:
            hvd.barrier()
            h = hvd.allreduce_async(np.ones(2), op=hvd.Sum, name="late.x")
        np.testing.assert_array_equal(hvd.synchronize(h), np.full(2, size))

    @add("auto_names")
    def _():
        # unnamed ops get the same generated names on every rank
        a = hvd.allreduce(np.full(2, rank, np.float64), op=hvd.Sum)
        b = hvd.allgather(np.full((1,), rank, np.int32))
        np.testing.assert_array_equal(a, np.full(2, sum(range(size))))
        np.testing.assert_array_equal(b, np.arange(size))

    @add("poll_then_synchronize")
    def _():
        import time
        h = hvd.allreduce_async(np.ones(8), op=hvd.Sum, name="poll")
        t0 = time.time()
        while not hvd.poll(h):
            assert time.time() - t0 < 30
            time.sleep(0.001)
        np.testing.assert_array_equal(hvd.synchronize(h), np.full(8, size))
        np.testing.assert_array_equal(h.wait(), np.full(8, size))  # again: same result

    @add("dropped_handle")
    def _():
        import gc
        # dropping a handle before completion must keep its buffers alive
        for i in range(20):
            hvd.allreduce_async_(np.full(1000, 1.0), op=hvd.Sum, name=f"drop.{i}")
            gc.collect()
        hvd.barrier()
        got = hvd.allreduce(np.ones(3), op=hvd.Sum, name="after_drop")
        np.testing.assert_array_equal(got, np.full(3, size))

    assert [n for n, _ in checks] == check_names(size), "check list out of sync"
    return checks


def main():
    import hvd
    from common import run_checks
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    info = {"size": size, "rank": rank, "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
            "cross_size": hvd.cross_size(), "transport": hvd.transport()}
    run_checks(make_checks(hvd, size, rank), rank, {"info": info})
    hvd.shutdown()


if __name__ == "__main__":
    main()
