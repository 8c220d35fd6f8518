"""hvd.torch.elastic: Horovod's elastic training for PyTorch (docs/elastic.md).

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state): ...

TorchState keeps copies of the model's and optimizer's state_dict (and of an
ElasticSampler's progress, an LR scheduler's state) at every commit, goes back
to them after a failure, and syncs them from rank 0 after a reset;
ElasticSampler shards a data set over the ranks and, after a reset, shards the
samples not yet processed this epoch over the new ranks.
"""

from __future__ import annotations

from ...elastic import (  # noqa: F401  (Horovod's names in hvd.torch.elastic)
    HorovodInternalError,
    HostsUpdatedInterrupt,
    MembershipChangedError,
    ObjectState,
    State,
    membership,
    run,
    run_fn,
)
from . import sampler, state  # noqa: F401  (Horovod's submodule paths)
from ._sampler import ElasticSampler  # noqa: F401
from ._state import TorchState  # noqa: F401

__all__ = ["run", "run_fn", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "HorovodInternalError", "MembershipChangedError",
           "membership"]
