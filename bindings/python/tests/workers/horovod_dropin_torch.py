"""What Horovod torch scripts rely on beyond the API's names, on 2 ranks (run
by test_horovod_dropin_torch.py under hvdrun):

  zero_grads_after_state_broadcast  broadcast_optimizer_state on a fresh
      optimizer leaves zero gradients on the trainable parameters (a frozen
      one keeps None), so hvd.broadcast(p.grad, 0) works afterwards;
  non_member_steps_alone  DistributedOptimizer(process_set=ps) built on a
      rank outside ps registers no hooks and steps as the plain optimizer;
  parameter_names  _parameter_names (parameter -> name), with and without
      named_parameters;
  step_after_synchronize_warning  step() after synchronize() without
      skip_synchronize() warns in Horovod's words.
"""

import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402  (the changed import line of a Horovod script)

CHECKS = ["zero_grads_after_state_broadcast", "non_member_steps_alone", "parameter_names",
          "step_after_synchronize_warning"]


class TwoParams(torch.nn.Module):
    """y = frozen * x + trainable * x, elementwise (4 features)."""

    def __init__(self):
        super().__init__()
        self.frozen = torch.nn.Parameter(torch.ones(4, dtype=torch.float64), requires_grad=False)
        self.trainable = torch.nn.Parameter(torch.full((4,), 2.0, dtype=torch.float64))

    def forward(self, x):
        return self.frozen * x + self.trainable * x


def make_checks(rank):
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    @check
    def zero_grads_after_state_broadcast():
        model = TwoParams()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert model.frozen.grad is None, model.frozen.grad
        g = model.trainable.grad
        assert isinstance(g, torch.Tensor), f"trainable .grad is {type(g).__name__}"
        assert torch.equal(g, torch.zeros(4, dtype=torch.float64)), g
        out = hvd.broadcast(model.trainable.grad, 0, name="zero_grads.bcast")
        assert torch.equal(out, torch.zeros(4, dtype=torch.float64)), out

    @check
    def non_member_steps_alone():
        ps = hvd.add_process_set([0])
        try:
            model = TwoParams()
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                           named_parameters=model.named_parameters(),
                                           process_set=ps)
            x = torch.full((4,), float(rank + 1), dtype=torch.float64)
            start = time.monotonic()
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            took = time.monotonic() - start
            assert took < 20, f"the step took {took:.1f} s"
            # d(sum)/d(trainable) = x: every rank applies its own gradient (rank 0's
            # set has one rank, rank 1 is outside it and steps alone)
            want = torch.full((4,), 2.0 - 0.5 * (rank + 1), dtype=torch.float64)
            assert torch.equal(model.trainable.detach(), want), (model.trainable, want)
            if rank != 0:
                assert not opt._hooks, "a non-member registered gradient hooks"
        finally:
            hvd.remove_process_set(ps)

    @check
    def parameter_names():
        model = TwoParams()
        params = list(model.parameters())
        opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1))
        names = opt._parameter_names
        assert isinstance(names, dict) and set(names) == set(params), names
        assert all(isinstance(n, str) for n in names.values()), names
        assert len(set(names.values())) == len(params), names
        model2 = TwoParams()
        opt2 = hvd.DistributedOptimizer(torch.optim.SGD(model2.parameters(), lr=0.1),
                                        named_parameters=model2.named_parameters())
        assert opt2._parameter_names == {p: n for n, p in model2.named_parameters()}

    @check
    def step_after_synchronize_warning():
        model = TwoParams()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        model(torch.ones(4, dtype=torch.float64)).sum().backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
        texts = [str(w.message) for w in caught]
        assert any("optimizer.step() called without optimizer.skip_synchronize()" in t
                   for t in texts), texts

    assert list(checks) == CHECKS, list(checks)
    return list(checks.items())


def main():
    from common import run_checks
    torch.set_num_threads(1)
    hvd.init()
    run_checks(make_checks(hvd.rank()), hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
