"""The training loop: seeded mini-batch epochs, a learning-rate schedule, early stopping.

``train_mlp`` standardises the inputs once (the scaler is fitted on the training split only),
then runs epochs of shuffled mini-batches; after each epoch it scores the validation split and
keeps a copy of the parameters whenever the validation loss improves. After ``patience`` epochs
without improvement it stops and restores the best copy. The training loss is cross-entropy
with label smoothing (``TrainConfig.label_smoothing``); reported validation losses are plain
cross-entropy. Everything random (initialisation, shuffling, the validation split) comes from
generators seeded by ``TrainConfig.seed``, and the arithmetic is single-path NumPy, so one seed
gives bit-identical weights run after run (same machine, same BLAS threads). The trade-off: the validation split is scored once per epoch, not
per step, which is coarse but costs < 5 % of an epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from openhood.train.augment import jitter_images
from openhood.train.config import TrainConfig
from openhood.train.layers import SoftmaxCrossEntropy
from openhood.train.model import MLP
from openhood.train.optim import lr_at, make_optimizer


@dataclass
class EpochStats:
    epoch: int
    train_loss: float
    train_accuracy: float
    val_loss: float | None
    val_accuracy: float | None
    lr: float
    seconds: float


@dataclass
class History:
    epochs: list[EpochStats] = field(default_factory=list)
    best_epoch: int = 0
    stopped_early: bool = False
    train_seconds: float = 0.0


def evaluate(model: MLP, x_scaled: np.ndarray, y: np.ndarray, batch: int = 4096) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) without touching gradients; batched to bound memory.

    The loss is plain cross-entropy whatever the training loss's label smoothing, so validation
    and test losses mean the same thing under every recipe.
    """
    ce = SoftmaxCrossEntropy()
    total_loss, correct = 0.0, 0
    for s in range(0, len(y), batch):
        xb, yb = x_scaled[s : s + batch], y[s : s + batch]
        z = model.logits(xb)
        correct += int((z.argmax(axis=1) == yb).sum())
        total_loss += ce.forward(z, yb) * len(yb)
    return total_loss / len(y), correct / len(y)


def validation_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random (train, validation) row indices, each sorted."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation fraction must be in [0, 1), got {fraction}")
    n_val = round(n * fraction)
    order = np.random.default_rng([seed, 2]).permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def train_mlp(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    cfg: TrainConfig,
    *,
    dtype=np.float32,
    image_shape: tuple[int, int] | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
) -> tuple[MLP, History]:
    """Train on (x (N, F) raw features, y (N,) int labels); the validation split is cut from them.

    With ``cfg.augment`` and an ``image_shape``, the training rows are re-drawn every epoch with
    a fresh affine jitter (``augment.jitter_images``); validation rows are never augmented.
    """
    t_start = time.perf_counter()
    tr, va = validation_split(len(y), cfg.validation_fraction if cfg.patience else 0.0, cfg.seed)
    augment = cfg.augment and image_shape is not None
    if len(tr) == 0:
        raise ValueError("no training rows left after the validation split")
    model = MLP((x.shape[1], *cfg.hidden, n_classes), dtype=dtype, seed=cfg.seed)
    model.loss = SoftmaxCrossEntropy(cfg.label_smoothing)  # the training objective
    model.fit_scaler(x[tr])
    x_tr, y_tr = model.scale(x[tr]), np.ascontiguousarray(y[tr])  # scaled once, not per batch
    x_va, y_va = model.scale(x[va]), y[va]
    raw_tr = x[tr] if augment else None
    opt = make_optimizer(
        cfg.optimizer, model.params, model.grads, model.n_decay, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )
    shuffle = np.random.default_rng([cfg.seed, 1])
    n = len(y_tr)
    steps_per_epoch = -(-n // cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    history = History()
    best_loss, best_params, since_best, step = np.inf, model.params.copy(), 0, 0
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        order = shuffle.permutation(n)
        ye = y_tr[order]
        if raw_tr is None or image_shape is None:
            xe = x_tr[order]  # one gather per epoch; batches are then contiguous slices
        else:
            xe = model.scale(jitter_images(raw_tr[order], image_shape, shuffle))
        loss_sum, correct = 0.0, 0
        lr = cfg.lr
        for s in range(0, n, cfg.batch_size):
            xb, yb = xe[s : s + cfg.batch_size], ye[s : s + cfg.batch_size]
            loss, predicted = model.loss_and_grad(xb, yb)
            lr = lr_at(step, total_steps, cfg.lr, cfg.schedule)
            opt.step(lr)
            step += 1
            loss_sum += loss * len(yb)
            correct += int(np.count_nonzero(predicted == yb))
        val_loss = val_acc = None
        if len(va):
            val_loss, val_acc = evaluate(model, x_va, y_va)
        stats = EpochStats(epoch, loss_sum / n, correct / n, val_loss, val_acc, lr, time.perf_counter() - t0)
        history.epochs.append(stats)
        if on_epoch is not None:
            on_epoch(stats)
        if val_loss is None:
            history.best_epoch = epoch
            continue
        if val_loss < best_loss:
            best_loss, since_best, history.best_epoch = val_loss, 0, epoch
            best_params[...] = model.params
        else:
            since_best += 1
            if since_best >= cfg.patience:
                history.stopped_early = epoch < cfg.epochs
                break
    if len(va):
        model.params[...] = best_params
    history.train_seconds = time.perf_counter() - t_start
    return model, history
