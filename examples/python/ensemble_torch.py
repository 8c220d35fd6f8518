"""Ensemble training: every rank trains its OWN model; ranks share only the
initial weights (one broadcast) and, at the end, a metric average and the
ensemble's averaged predictions.

    hvdrun -np 4 python ensemble_torch.py

The difference from data parallelism (train_torch.py), in code:

    # data parallel: gradients are averaged every step, one model in the end
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=...)
    # ensemble: the optimizer stays local -- no communication while training;
    # each rank sees a different bootstrap sample and ends with a different model
    optimizer = torch.optim.SGD(model.parameters(), lr=...)
"""

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import _hvd_path  # noqa: F401
import hvd.torch as hvd


def main(epochs=15):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0,
                                              stratify=y)
    g = torch.Generator().manual_seed(rank)
    boot = torch.randint(0, len(x_tr), (len(x_tr),), generator=g)  # this rank's bootstrap

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # shared initial weights only
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # local: no hvd wrapper
    for _ in range(epochs):
        for idx in boot[torch.randperm(len(boot), generator=g)].split(32):
            opt.zero_grad()
            F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
            opt.step()

    with torch.no_grad():
        probs = F.softmax(model(x_te), 1)
    mine = (probs.argmax(1) == y_te).float().mean()
    mean_acc = hvd.allreduce(mine, op=hvd.Average, name="member_accuracy")
    ens = hvd.allreduce(probs, op=hvd.Average, name="ensemble_probs")  # average the members
    ens_acc = (ens.argmax(1) == y_te).float().mean()
    accs = hvd.allgather_object(round(mine.item(), 4))
    if rank == 0:
        print(f"member accuracies: {accs}")
        print(f"mean member accuracy: {mean_acc.item():.4f}; ensemble of {size}: "
              f"{ens_acc.item():.4f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
