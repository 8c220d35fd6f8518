"""Ensemble of data-parallel models with process sets: the ranks split into
groups, each group trains ITS OWN model data-parallel (gradients averaged
only within the group), then the whole job compares and combines the models.

    hvdrun -np 4 python ensemble_process_sets.py     # 2 groups of 2 ranks

What process sets change, in code:

    groups = [hvd.add_process_set(r) for r in (first_half, second_half)]
    mine = the group this rank is in
    hvd.broadcast_parameters(model.state_dict(), root_rank=mine.ranks[0], process_set=mine)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=...,
                                         process_set=mine)   # averages within the group

Each group's model has its own width and seed; within a group the ranks
train on disjoint shards of the data and end with one model. At the end
every rank scores its group's model on the validation set, the job
allgathers the groups' scores, and the groups' averaged predictions make
the ensemble's.
"""

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import _hvd_path  # noqa: F401
import hvd.torch as hvd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--groups", type=int, default=2)
    args = ap.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    n_groups = max(1, min(args.groups, size))
    # Contiguous groups of ranks: [0, 1], [2, 3] at 4 ranks. Every rank
    # registers every group, in the same order (the call is collective).
    bounds = [size * g // n_groups for g in range(n_groups + 1)]
    groups = [hvd.add_process_set(list(range(bounds[g], bounds[g + 1])))
              for g in range(n_groups)]
    gid = next(g for g, ps in enumerate(groups) if ps.included())
    mine = groups[gid]

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    shard = torch.arange(mine.rank(), len(x_tr), mine.size())  # this rank's part of the data

    torch.manual_seed(100 + gid)  # one model per group: its own seed and width
    width = 16 * (gid + 2)
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    hvd.broadcast_parameters(model.state_dict(), root_rank=mine.ranks[0], process_set=mine)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   process_set=mine)
    g = torch.Generator().manual_seed(gid)
    for _ in range(args.epochs):
        for idx in shard[torch.randperm(len(shard), generator=g)].split(32):
            opt.zero_grad()
            F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
            opt.step()

    # The group's ranks hold one model: the same parameters everywhere in it.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    spread = hvd.allreduce(flat, op=hvd.Max, name="params.max", process_set=mine) - \
        hvd.allreduce(flat, op=hvd.Min, name="params.min", process_set=mine)
    assert spread.abs().max().item() == 0.0, "a group's ranks disagree on its model"

    with torch.no_grad():
        probs = F.softmax(model(x_te), 1)
    acc = (probs.argmax(1) == y_te).float().mean().item()
    # Every rank's (group, score); one line per group.
    scores = sorted(set(hvd.allgather_object((gid, round(acc, 4)))))
    # The ensemble: every group's predictions, averaged with equal weight
    # (each rank counts 1 / its group's size).
    ens = hvd.allreduce(probs / mine.size(), op=hvd.Sum, name="ensemble_probs") / n_groups
    ens_acc = (ens.argmax(1) == y_te).float().mean().item()
    if rank == 0:
        for g_, s in scores:
            print(f"group {g_} (ranks {groups[g_].ranks}, width {16 * (g_ + 2)}): "
                  f"validation accuracy {s:.4f}")
        print(f"ensemble of {n_groups} models: validation accuracy {ens_acc:.4f}", flush=True)
    for ps in groups:
        hvd.remove_process_set(ps)
    hvd.shutdown()


if __name__ == "__main__":
    main()
