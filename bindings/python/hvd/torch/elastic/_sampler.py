"""hvd.torch.elastic.sampler: ElasticSampler (Horovod's
horovod.torch.elastic.sampler; hvd.torch.elastic re-exports it), which shards
a data set over the ranks and, after a reset, shards the samples not yet
processed this epoch over the new ranks."""

from __future__ import annotations

import math
import random

import torch

from ... import elastic as _elastic

def _world():
    """(size, rank) of the default context, through hvd.elastic's backend."""
    b = _elastic._backend
    return b.size(), b.rank()


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: shards dataset's indices over the ranks (the
    same shuffled order on every rank: seed + epoch), and records which
    indices were processed, so that after a reset the remaining ones are
    sharded over the new ranks.

    As in Horovod: put it in the TorchState (its progress is then committed,
    restored and synced), call record_batch(batch_idx, batch_size) (or
    record_indices) after processing a batch, and set_epoch(epoch) at the
    END of each epoch (it clears the processed indices).

    Sharding: remaining = the shuffled indices not processed yet; it is
    padded (repeating it from the start) to a multiple of the number of
    ranks, and rank r takes remaining[r::size]. len(sampler) is
    ceil(len(remaining) / size).

    num_replicas, rank (an hvd addition, as torch's DistributedSampler has
    them): a fixed number of ranks and rank instead of hvd.size() and
    hvd.rank() at each reset, e.g. to compute on one process what each rank
    of a job would get."""

    def __init__(self, dataset, shuffle=True, seed=0, num_replicas=None, rank=None):
        if (num_replicas is None) != (rank is None):
            raise ValueError("hvd.torch.elastic.ElasticSampler: give num_replicas and rank "
                             "together, or neither")
        if num_replicas is not None and not 0 <= rank < num_replicas:
            raise ValueError(f"hvd.torch.elastic.ElasticSampler: rank {rank} is not in "
                             f"[0, {num_replicas})")
        self._fixed = None if num_replicas is None else (int(num_replicas), int(rank))
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: a new order (with shuffle) and no index processed."""
        self.epoch = int(epoch)
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks this rank's batch batch_idx (of batch_size samples, counted
        from the start of the current iteration) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Marks dataset indices as processed (this epoch)."""
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices of batch batch_idx."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        self.epoch = int(state_dict["epoch"])
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Shards the remaining indices over the current ranks (hvd.size(), hvd.rank())."""
        self.num_replicas, self.rank = self._fixed or _world()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        done = self.processed_indices
        self.remaining_indices = [i for i in order if i not in done]
        n = self.num_replicas
        self.num_samples = int(math.ceil(len(self.remaining_indices) / n))
        self.total_size = self.num_samples * n
        padded = list(self.remaining_indices)
        while len(padded) < self.total_size:
            padded += self.remaining_indices[:self.total_size - len(padded)]
        self.indices = padded[self.rank:self.total_size:n]

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples


__all__ = ["ElasticSampler"]
