"""A Horovod torch script's use of compression= on hvd.torch's collectives on
2 ranks (run by test_horovod_torch_compression.py under hvdrun): allreduce,
grouped_allreduce, reducescatter and grouped_reducescatter take Horovod's
compression argument (allreduce's 4th positional, reducescatter's 3rd), with
Compression.fp16, Compression.none and a compressor of the script's own;
gradients flow through the compression; the _async and in-place forms take
no compression, as in Horovod.

Every check is exact. The fp16 references are computed here from both ranks'
inputs: each rank's values rounded to float16, summed in float32 (exact for
two float16 values), halved for Average (exact), rounded to float16 once and
cast back to the input's dtype. The inputs are not float16 values, so each
check also asserts that the uncompressed result differs.
"""

import inspect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402  (the changed import line of a Horovod script)

CHECKS = ["allreduce_fp16_positional", "allreduce_fp16_average_float64", "allreduce_fp16_grad",
          "allreduce_none_and_integers", "allreduce_own_compressor", "grouped_allreduce_fp16",
          "grouped_allreduce_fp16_grad", "reducescatter_fp16", "reducescatter_fp16_grad",
          "grouped_reducescatter_fp16", "signatures_as_horovod"]


def eq(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}:\n got {got.tolist()}\nwant {want.tolist()}"


def fp16_sum(values, dtype, average=False):
    """The float16 reduction of the ranks' values, in dtype."""
    s = sum(v.to(torch.float16).to(torch.float32) for v in values)
    if average:
        s = s / len(values)
    return s.to(torch.float16).to(dtype)


def make_checks(size, rank):
    n, r = size, rank
    assert n == 2, "the references assume 2 ranks"
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    def value(k, dtype=torch.float32, shape=(3,)):
        """Rank k's input: not float16 values (1 + a few 2^-13 steps, and more)."""
        base = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float64)
        return (base * (1 + (k + 1) * 2.0 ** -13) + k / 3.0).reshape(shape).to(dtype)

    # -- allreduce -------------------------------------------------------------------------
    @check
    def allreduce_fp16_positional():
        x = value(r)
        # Horovod's positional order: tensor, average, name, compression, op
        got = hvd.allreduce(x, None, "c.ar", hvd.Compression.fp16, hvd.Sum)
        plain = hvd.allreduce(x, None, "c.ar.plain", hvd.Compression.none, hvd.Sum)
        want = fp16_sum([value(k) for k in range(n)], torch.float32)
        eq(got, want, "fp16 Sum")
        eq(x, value(r), "input unchanged")
        assert not torch.equal(plain, got), "compression changed nothing: the test proves nothing"
        eq(plain, value(0) + value(1), "uncompressed Sum")

    @check
    def allreduce_fp16_average_float64():
        x = value(r, torch.float64, (2, 2))
        got = hvd.allreduce(x, name="c.ar.avg", compression=hvd.Compression.fp16)  # Average
        eq(got, fp16_sum([value(k, torch.float64, (2, 2)) for k in range(n)], torch.float64,
                         average=True), "fp16 Average of float64")

    @check
    def allreduce_fp16_grad():
        x = value(r).requires_grad_()
        y = hvd.allreduce(x, name="c.ar.grad", compression=hvd.Compression.fp16, op=hvd.Sum)
        assert y.dtype == torch.float32 and y.requires_grad
        w = [value(k) * 0.25 + 1 for k in range(n)]  # the backward's per-rank incoming gradients
        (y * w[r]).sum().backward()
        # d/dx_r of sum_k w_k . allreduce(x): the float16 Sum of the w_k (the
        # gradient goes through the float16 cast and the same allreduce)
        eq(x.grad, fp16_sum(w, torch.float32), "gradient")

    @check
    def allreduce_none_and_integers():
        x = value(r, torch.float64)
        eq(hvd.allreduce(x, None, "c.none", hvd.Compression.none, hvd.Sum),
           value(0, torch.float64) + value(1, torch.float64), "Compression.none")
        i = torch.tensor([3 + r, -7 * r, 1 << 20], dtype=torch.int32)
        got = hvd.allreduce(i, name="c.int", compression=hvd.Compression.fp16, op=hvd.Sum)
        eq(got, torch.tensor([7, -7, 1 << 21], dtype=torch.int32), "integers stay integers")

    @check
    def allreduce_own_compressor():
        calls = []

        class Quantize(hvd.Compressor):
            """A script's compressor: eighths as int32."""

            @staticmethod
            def compress(tensor):
                calls.append("compress")
                return torch.round(tensor * 8).to(torch.int32), tensor.dtype

            @staticmethod
            def decompress(tensor, ctx):
                calls.append(("decompress", tensor.dtype, ctx))
                return tensor.to(ctx) / 8

        x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float64) * (r + 1)
        got = hvd.allreduce(x, None, "c.own", Quantize, hvd.Sum)
        # rank 0 sends round(8x) = [2, 14, -18], rank 1 round(16x) = [5, 27, -35]
        eq(got, torch.tensor([7 / 8, 41 / 8, -53 / 8], dtype=torch.float64), "quantized Sum")
        assert calls == ["compress", ("decompress", torch.int32, torch.float64)], calls

    # -- grouped_allreduce -----------------------------------------------------------------
    @check
    def grouped_allreduce_fp16():
        a, b = value(r), value(r, torch.float64, (2, 3))
        # float32 and float64 both travel as float16: one group of one dtype
        got = hvd.grouped_allreduce([a, b], None, "c.gar", hvd.Compression.fp16, hvd.Sum)
        assert isinstance(got, list) and len(got) == 2
        eq(got[0], fp16_sum([value(k) for k in range(n)], torch.float32), "member 0")
        eq(got[1], fp16_sum([value(k, torch.float64, (2, 3)) for k in range(n)], torch.float64),
           "member 1")
        avg = hvd.grouped_allreduce([a], name="c.gar.avg", compression=hvd.Compression.fp16)
        eq(avg[0], fp16_sum([value(k) for k in range(n)], torch.float32, average=True),
           "Average")

    @check
    def grouped_allreduce_fp16_grad():
        xs = [value(r).requires_grad_(), value(r, torch.float64, (2,)).requires_grad_()]
        ys = hvd.grouped_allreduce(xs, name="c.gar.grad", compression=hvd.Compression.fp16,
                                   op=hvd.Sum)
        assert [y.dtype for y in ys] == [torch.float32, torch.float64]
        w = [[value(k) * 0.25 + 1, value(k, torch.float64, (2,)) * 0.5 + 3] for k in range(n)]
        sum((y * wr).sum() for y, wr in zip(ys, w[r])).backward()
        eq(xs[0].grad, fp16_sum([w[k][0] for k in range(n)], torch.float32), "gradient 0")
        eq(xs[1].grad, fp16_sum([w[k][1] for k in range(n)], torch.float64), "gradient 1")

    # -- reducescatter ---------------------------------------------------------------------
    @check
    def reducescatter_fp16():
        x = value(r, torch.float64, (2, 3))
        # Horovod's positional order: tensor, name, compression, op
        got = hvd.reducescatter(x, "c.rs", hvd.Compression.fp16, hvd.Sum)
        full = fp16_sum([value(k, torch.float64, (2, 3)) for k in range(n)], torch.float64)
        eq(got, full[r:r + 1], "this rank's row of the fp16 Sum")
        plain = hvd.reducescatter(x, name="c.rs.plain", op=hvd.Sum)
        assert not torch.equal(plain, got), "compression changed nothing"
        avg = hvd.reducescatter(x, name="c.rs.avg", compression=hvd.Compression.fp16)
        fa = fp16_sum([value(k, torch.float64, (2, 3)) for k in range(n)], torch.float64, True)
        eq(avg, fa[r:r + 1], "fp16 Average")

    @check
    def reducescatter_fp16_grad():
        x = value(r, torch.float32, (2, 3)).requires_grad_()
        y = hvd.reducescatter(x, name="c.rs.grad", compression=hvd.Compression.fp16, op=hvd.Sum)
        assert y.dtype == torch.float32 and tuple(y.shape) == (1, 3)
        w = [value(k, torch.float32, (1, 3)) + 0.5 for k in range(n)]
        (y * w[r]).sum().backward()
        # reducescatter's gradient: the allgathered incoming gradients (times
        # size for Sum), as float16
        gathered = torch.cat([wk.to(torch.float16) for wk in w]).to(torch.float32) * n
        eq(x.grad, gathered.to(torch.float16).to(torch.float32), "gradient")

    @check
    def grouped_reducescatter_fp16():
        xs = [value(r, torch.float32, (2, 2)), value(r, torch.float64, (3, 1))]
        got = hvd.grouped_reducescatter(xs, "c.grs", hvd.Compression.fp16, hvd.Sum)
        f0 = fp16_sum([value(k, torch.float32, (2, 2)) for k in range(n)], torch.float32)
        f1 = fp16_sum([value(k, torch.float64, (3, 1)) for k in range(n)], torch.float64)
        eq(got[0], f0[r:r + 1], "member 0")
        eq(got[1], f1[0:2] if r == 0 else f1[2:3], "member 1 (rank 0 gets the extra row)")

    # -- signatures ------------------------------------------------------------------------
    @check
    def signatures_as_horovod():
        def params(fn):
            return list(inspect.signature(fn).parameters)

        tail = ["prescale_factor", "postscale_factor", "process_set"]
        for fn in (hvd.allreduce, hvd.grouped_allreduce):
            assert params(fn) == [params(fn)[0], "average", "name", "compression", "op", *tail], \
                (fn.__name__, params(fn))
        for fn in (hvd.reducescatter, hvd.grouped_reducescatter):
            assert params(fn) == [params(fn)[0], "name", "compression", "op", *tail], \
                (fn.__name__, params(fn))
        # Horovod's _async and in-place forms have no compression: op stays 4th
        for fn in (hvd.allreduce_async, hvd.allreduce_, hvd.allreduce_async_,
                   hvd.grouped_allreduce_async, hvd.grouped_allreduce_,
                   hvd.grouped_allreduce_async_):
            assert params(fn)[1:4] == ["average", "name", "op"], (fn.__name__, params(fn))
            assert "compression" not in params(fn), fn.__name__
        for fn in (hvd.reducescatter_async, hvd.grouped_reducescatter_async):
            assert params(fn)[1:3] == ["name", "op"], (fn.__name__, params(fn))
        t = torch.tensor([1.0 + r, 2.0], dtype=torch.float64)
        out = hvd.allreduce_(t, None, "c.inplace", hvd.Sum)  # op positional, 4th
        eq(t, torch.tensor([3.0, 4.0], dtype=torch.float64), "allreduce_ in place")
        assert out is t or torch.equal(out, t)
        try:
            hvd.allreduce_async_(t, compression=hvd.Compression.fp16)
        except TypeError:
            pass
        else:
            raise AssertionError("allreduce_async_ took compression= (Horovod's has none)")

    assert list(checks) == CHECKS, list(checks)
    return list(checks.items())


def main():
    from common import run_checks
    torch.set_num_threads(1)
    hvd.init()
    run_checks(make_checks(hvd.size(), hvd.rank()), hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
