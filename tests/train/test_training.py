"""The training loop: bit-reproducible per seed, early stopping, and accuracy on the digits test tail.

The issue's goal (>= 97.5 % mean over 5 seeds, full recipe) is measured by benchmarks/train.py;
here a reduced budget (2 seeds, 128 hidden units, 15 epochs) must clear a floor that a broken backward, optimizer
or data split could not.
"""

from __future__ import annotations

import numpy as np
import pytest

from openhood.train.config import TrainConfig
from openhood.train.data import load_dataset
from openhood.train.trainer import evaluate, train_mlp


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", None)


def test_same_seed_bit_identical_weights(digits):
    cfg = TrainConfig(hidden=(32,), epochs=3, seed=4)
    a, _ = train_mlp(digits.x_train, digits.y_train, 10, cfg, image_shape=digits.image_shape)
    b, _ = train_mlp(digits.x_train, digits.y_train, 10, cfg, image_shape=digits.image_shape)
    c, _ = train_mlp(
        digits.x_train, digits.y_train, 10, TrainConfig(hidden=(32,), epochs=3, seed=5), image_shape=digits.image_shape
    )
    assert a.params.tobytes() == b.params.tobytes()
    assert a.params.tobytes() != c.params.tobytes()


def test_early_stopping_restores_the_best_epoch(digits):
    cfg = TrainConfig(hidden=(32,), epochs=60, lr=0.05, schedule="constant", patience=3, augment=False)
    seen = []
    _model, h = train_mlp(digits.x_train, digits.y_train, 10, cfg, on_epoch=seen.append)
    assert h.stopped_early and len(h.epochs) < 60 and len(seen) == len(h.epochs)
    best = min(e.val_loss for e in h.epochs)
    assert h.epochs[h.best_epoch - 1].val_loss == best
    assert len(h.epochs) == h.best_epoch + cfg.patience


@pytest.mark.parametrize("optimizer, lr", [("adam", 3e-3), ("sgd", 0.05)])
def test_test_accuracy_reduced_budget(digits, optimizer, lr):
    accs = []
    for seed in range(2):
        cfg = TrainConfig(hidden=(128,), epochs=15, optimizer=optimizer, lr=lr, seed=seed)
        model, _ = train_mlp(digits.x_train, digits.y_train, 10, cfg, image_shape=digits.image_shape)
        accs.append(evaluate(model, model.scale(digits.x_test), digits.y_test)[1])
    assert np.mean(accs) >= 0.85, accs  # measured 0.90 (adam); chance is 0.10
