# Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py, run on hvd.
#
# The script is Horovod's, line for line, except for:
#   - the import line: `import horovod.tensorflow.keras as hvd` became
#     `import hvd.keras as hvd` (and `import horovod` went: its only use
#     was horovod.run, see the end);
#   - the data: synthetic MNIST-shaped images (class-dependent strokes plus
#     noise) instead of tf.keras.datasets.mnist.load_data(), which downloads;
#   - what Keras 3 no longer accepts: compile()'s
#     experimental_run_tf_function=False (Keras 3 compiles the train step
#     itself; hvd's DistributedOptimizer works in it) and a full-model
#     checkpoint named *.h5 (now *.keras);
#   - flags for the sizes (Horovod's values are the defaults), and two lines
#     at the end that print the averaged metrics and a checksum of each
#     rank's weights, for the test that runs it.
#
#     hvdrun -np 2 python examples/python/horovod_keras_mnist.py
#     hvdrun -np 2 python examples/python/horovod_keras_mnist.py --epochs 3 --steps 40
#
# Copyright 2019 Uber Technologies, Inc. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import _hvd_path  # noqa: F401,E402  (a source checkout: finds bindings/python)
import hvd.keras as hvd  # noqa: E402  (was: import horovod.tensorflow.keras as hvd)

parser = argparse.ArgumentParser(description="Horovod's Keras MNIST example on hvd")
parser.add_argument("--epochs", type=int, default=24)
parser.add_argument("--steps", type=int, default=500, help="steps per epoch, before / size")
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--samples", type=int, default=60000)
args = parser.parse_args()


def synthetic_mnist(n, seed):
    """(images uint8 [n, 28, 28], labels uint8 [n]) shaped like
    mnist.load_data()'s training set: each class draws its own strokes, with
    pixel noise and a random shift of up to 2 pixels."""
    rng = np.random.default_rng(seed)
    protos = np.zeros((10, 28, 28), np.float32)
    pattern = np.random.default_rng(1234)  # the same classes on every rank
    for c in range(10):
        for _ in range(4):
            r, k = pattern.integers(4, 24, size=2)
            if pattern.random() < 0.5:
                protos[c, r - 1:r + 2, max(k - 8, 2):k + 4] = 1.0
            else:
                protos[c, max(r - 8, 2):r + 4, k - 1:k + 2] = 1.0
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    images = protos[labels] + rng.normal(0.0, 0.3, size=(n, 28, 28)).astype(np.float32)
    shifts = rng.integers(-2, 3, size=(n, 2))
    for i in range(n):
        images[i] = np.roll(images[i], tuple(shifts[i]), axis=(0, 1))
    return (np.clip(images, 0, 1) * 255).astype(np.uint8), labels


def main():
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

    (mnist_images, mnist_labels) = synthetic_mnist(args.samples, seed=hvd.rank())

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32),
         tf.cast(mnist_labels, tf.int64))
    )
    dataset = dataset.repeat().shuffle(10000).batch(args.batch_size)

    mnist_model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(64, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax')
    ])

    # Horovod: adjust learning rate based on number of GPUs.
    scaled_lr = 0.001 * hvd.size()
    opt = tf.optimizers.Adam(scaled_lr)

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(
        opt, backward_passes_per_step=1, average_aggregated_gradients=True)

    # Horovod: Specify `experimental_run_tf_function=False` to ensure TensorFlow
    # uses hvd.DistributedOptimizer() to compute gradients.
    # (Keras 3: the argument is gone; the compiled train step uses the optimizer.)
    mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                        optimizer=opt,
                        metrics=['accuracy'])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # This is necessary to ensure consistent initialization of all workers when
        # training is started with random weights or restored from a checkpoint.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),

        # Horovod: average metrics among workers at the end of every epoch.
        #
        # Note: This callback must be in the list before the ReduceLROnPlateau,
        # TensorBoard or other metrics-based callbacks.
        hvd.callbacks.MetricAverageCallback(),

        # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final
        # accuracy. Scale the learning rate `lr = 1.0` ---> `lr = 1.0 * hvd.size()` during
        # the first three epochs. See https://arxiv.org/abs/1706.02677 for details.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint('./checkpoint-{epoch}.keras'))

    # Horovod: write logs on worker 0.
    verbose = 1 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    history = mnist_model.fit(dataset, steps_per_epoch=args.steps // hvd.size(),
                              callbacks=callbacks, epochs=args.epochs, verbose=verbose)

    # hvd: what the test checks (the averaged metrics of the last epoch, and
    # that every rank ends with the same weights).
    if hvd.rank() == 0:
        print(f"final: loss {history.history['loss'][-1]:.4f} "
              f"accuracy {history.history['accuracy'][-1]:.4f}", flush=True)
    checksum = float(sum(np.sum(w.astype(np.float64)) for w in mnist_model.get_weights()))
    print(f"rank {hvd.rank()} weights checksum {checksum:.10e}", flush=True)


if __name__ == '__main__':
    # Horovod's example also starts itself through horovod.run when given
    # three arguments; hvd has no horovod.run: launch with hvdrun.
    main()
    sys.exit(0)
