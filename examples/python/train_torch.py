"""Data-parallel training of a small CNN on scikit-learn's bundled digits data
set (8x8 images, 10 classes; nothing is downloaded).

    python train_torch.py                     # one process
    hvdrun -np 2 python train_torch.py        # two ranks, same script

Each rank trains on its own shard of the training set; hvd.DistributedOptimizer
averages the gradients, so all ranks keep identical weights. The learning rate
is scaled by the number of ranks (the global batch grows with it), rank 0's
initial weights are broadcast to everyone, and only rank 0 writes checkpoints
and shows a progress bar. Where CUDA is available each rank trains on GPU
(local rank % GPUs) and its CUDA gradients are averaged on the device;
`hvdrun --transport nccl` runs those allreduces on NCCL (docs/gpu.md), and
`hvdrun -x HVD_CUDA_ASYNC_COMPLETION=1 ...` lets the optimizer go on as soon as
the averaged gradients are queued on the training stream, without the host
waiting for them (stream-ordered completion; nothing changes in the script).
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

try:
    import hvd.torch as hvd
except ImportError:  # running from a source checkout without pip install
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "bindings", "python"))
    import hvd.torch as hvd


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 2 * 2, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 8x8 -> 4x4
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 4x4 -> 2x2
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.02, help="for one rank; scaled by size")
    ap.add_argument("--checkpoint-dir", default="checkpoints")
    ap.add_argument("--fp16-allreduce", action="store_true")
    ap.add_argument("--no-cuda", action="store_true", help="stay on the CPU where a GPU exists")
    args = ap.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # One GPU per local rank where there are GPUs (ranks beyond them share,
    # as on a one-GPU machine); the CPU otherwise.
    cuda = torch.cuda.is_available() and not args.no_cuda
    if cuda:
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    torch.manual_seed(1234 + rank)  # different on purpose: the broadcast below aligns them
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    # Equal shards, so every rank runs the same number of steps per epoch.
    n = len(x_train) // size * size
    x_shard = torch.from_numpy(x_train[rank:n:size]).to(device)
    y_shard = torch.from_numpy(y_train[rank:n:size]).to(device)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    steps = len(x_shard) // args.batch_size
    gen = torch.Generator().manual_seed(rank)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_shard), generator=gen).to(device)
        # Advanced by hand after each step: set_postfix inside `for step in bar`
        # would redraw with the count of the step before it. An epoch here
        # takes well under tqdm's default 0.1 s between redraws, hence 0.02 s.
        bar = tqdm(total=steps, desc=f"epoch {epoch + 1}/{args.epochs}", disable=rank != 0,
                   leave=False, mininterval=0.02)
        total = 0.0
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_shard[idx]), y_shard[idx])
            loss.backward()
            optimizer.step()
            total += loss.item()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
            bar.update(1)
        bar.close()
        # The mean training loss over all ranks (a collective: every rank calls it).
        mean_loss = hvd.allreduce(torch.tensor(total / max(steps, 1)), name="train_loss")
        if rank == 0:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            torch.save({"epoch": epoch + 1, "model": model.state_dict(),
                        "optimizer": optimizer.state_dict()},
                       os.path.join(args.checkpoint_dir, "checkpoint.pt"))
            print(f"epoch {epoch + 1}: mean train loss {mean_loss.item():.4f}", flush=True)

    # Test accuracy: each rank scores its slice of the test set; sum the counts.
    model.eval()
    with torch.no_grad():
        xt = torch.from_numpy(x_test[rank::size]).to(device)
        yt = torch.from_numpy(y_test[rank::size]).to(device)
        correct = (model(xt).argmax(1) == yt).sum()
    counts = hvd.allreduce(torch.tensor([correct.item(), len(yt)], dtype=torch.int64),
                           op=hvd.Sum, name="test_counts")
    if rank == 0:
        print(f"test accuracy: {counts[0].item() / counts[1].item():.4f} "
              f"({counts[0].item()}/{counts[1].item()}, {size} rank(s))", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
