"""The main example (train_torch.py's CNN on scikit-learn's digits) on Ray, two
ways: Horovod's RayExecutor, and Ray Train with hvd as its backend.

    python train_torch_ray.py --num-workers 2                 # RayExecutor
    python train_torch_ray.py --num-workers 2 --ray-train     # Ray Train (HvdConfig)
    python train_torch_ray.py --address auto ...              # an existing Ray cluster

A Horovod-on-Ray script runs by changing its imports (``horovod.ray`` ->
``hvd.ray``, ``horovod.torch`` -> ``hvd.torch``). Each rank trains on its own
shard; hvd.DistributedOptimizer averages the gradients, so every rank ends
with the same weights (the returned digest shows it).
"""

import argparse
import hashlib
import os
import sys
import tempfile


def train(epochs=6, batch_size=32, lr=0.02, report=False):
    """One rank's training (runs in a Ray actor). Returns (rank, size, test
    accuracy, a digest of the final weights, seconds per step)."""
    import time

    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import hvd.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(1234 + rank)  # the broadcast below aligns them
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 2 * 2, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    n = len(x_train) // size * size
    xs, ys = torch.from_numpy(x_train[rank:n:size]), torch.from_numpy(y_train[rank:n:size])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * size, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    steps = len(xs) // batch_size
    gen = torch.Generator().manual_seed(rank)
    step_times = []
    for epoch in range(epochs):
        order = torch.randperm(len(xs), generator=gen)
        for step in range(steps):
            t0 = time.perf_counter()
            idx = order[step * batch_size:(step + 1) * batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(xs[idx]), ys[idx]).backward()
            optimizer.step()
            step_times.append(time.perf_counter() - t0)
        if report and epoch + 1 < epochs:  # the last one comes with the test accuracy
            _report(hvd, model, epoch)
    model.eval()
    with torch.no_grad():
        xt, yt = torch.from_numpy(x_test[rank::size]), torch.from_numpy(y_test[rank::size])
        correct = (model(xt).argmax(1) == yt).sum()
    counts = hvd.allreduce(torch.tensor([correct.item(), len(yt)]), op=hvd.Sum, name="test_counts")
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.state_dict().values())).hexdigest()
    if report:  # Ray Train: the last epoch's report adds the test accuracy and the layout
        _report(hvd, model, epochs - 1, {"test_accuracy": counts[0].item() / counts[1].item(),
                                         "size": size, "cross_size": hvd.cross_size(),
                                         "local_size": hvd.local_size()})
    hvd.shutdown()
    step_times.sort()
    return rank, size, counts[0].item() / counts[1].item(), digest, step_times[len(step_times) // 2]


def _report(hvd, model, epoch, extra=None):
    """Ray Train: every rank reports (the epoch, and `extra`); rank 0 attaches
    a checkpoint."""
    import ray.train
    import torch

    with tempfile.TemporaryDirectory() as d:
        ckpt = None
        if hvd.rank() == 0:
            torch.save(model.state_dict(), os.path.join(d, "model.pt"))
            ckpt = ray.train.Checkpoint.from_directory(d)
        ray.train.report(dict({"epoch": epoch + 1}, **(extra or {})), checkpoint=ckpt)


def run_executor(num_workers, epochs):
    from hvd.ray import RayExecutor

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=num_workers)
    executor.start()
    try:
        return executor.run(train, kwargs={"epochs": epochs})
    finally:
        executor.shutdown()


def run_ray_train(num_workers, epochs, storage, placement_strategy="PACK"):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from hvd.ray import HvdConfig

    def loop(config):
        train(epochs=config["epochs"], report=True)

    trainer = DataParallelTrainer(loop, train_loop_config={"epochs": epochs},
                                  backend_config=HvdConfig(),
                                  scaling_config=ScalingConfig(
                                      num_workers=num_workers,
                                      placement_strategy=placement_strategy),
                                  run_config=RunConfig(storage_path=storage, name="hvd_digits"))
    return trainer.fit()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--address", default=None, help="a Ray cluster (default: start one here)")
    ap.add_argument("--ray-train", action="store_true", help="Ray Train with hvd as its backend")
    ap.add_argument("--storage", default=os.path.abspath("ray_results"))
    args = ap.parse_args()
    import ray

    ray.init(address=args.address)
    if args.ray_train:
        result = run_ray_train(args.num_workers, args.epochs, args.storage)
        print(f"ray train: last report {result.metrics}, checkpoint {result.checkpoint.path}")
    else:
        for rank, size, acc, digest, step_s in run_executor(args.num_workers, args.epochs):
            print(f"rank {rank} of {size}: test accuracy {acc:.4f}, weights {digest[:16]}, "
                  f"step {step_s * 1e3:.2f} ms")
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
