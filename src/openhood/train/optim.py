"""Optimizers over the model's flat buffers: SGD with momentum and Adam, L2 decay, LR schedules.

Both follow PyTorch's update rules exactly (``torch.optim.SGD`` with momentum and no dampening,
``torch.optim.Adam`` with bias correction), so one step on the same data matches PyTorch to
float64 rounding (tests/train/test_torch_parity.py). L2 weight decay is the classic kind, added
to the gradient (``g += wd * w``) before the update, for weights only (``params[:n_decay]``).
Each update is a few whole-buffer NumPy calls on the flat parameter vector, the trade-off being
that every parameter shares one learning rate and one set of betas.

A schedule maps a step index to a learning rate: ``constant``, ``cosine`` (to 0 at the last
step) and ``step`` (×0.1 at 50 % and 75 % of the steps).

    >>> [round(lr_at(s, 4, 1.0, "cosine"), 3) for s in range(4)]
    [1.0, 0.854, 0.5, 0.146]
"""

from __future__ import annotations

import math

import numpy as np

SCHEDULES = ("constant", "cosine", "step")
OPTIMIZERS = ("adam", "sgd")


def lr_at(step: int, total_steps: int, base_lr: float, schedule: str) -> float:
    """Learning rate for 0-based ``step`` of ``total_steps``."""
    if schedule == "constant":
        return base_lr
    frac = step / max(total_steps, 1)
    if schedule == "cosine":
        return base_lr * 0.5 * (1.0 + math.cos(math.pi * frac))
    if schedule == "step":
        return base_lr * (0.1 ** ((frac >= 0.5) + (frac >= 0.75)))
    raise ValueError(f"unknown schedule {schedule!r}; known: {SCHEDULES}")


class _Optimizer:
    def __init__(self, params: np.ndarray, grads: np.ndarray, n_decay: int, weight_decay: float):
        self.params, self.grads = params, grads  # (P,) flat views shared with the model
        self.n_decay = n_decay
        self.weight_decay = weight_decay
        self._tmp = np.empty_like(params)

    def _decay(self) -> None:
        if self.weight_decay:
            w, g = self.params[: self.n_decay], self.grads[: self.n_decay]
            tmp = self._tmp[: self.n_decay]
            np.multiply(w, self.weight_decay, out=tmp)
            g += tmp


class SGD(_Optimizer):
    """p -= lr * buf, buf = momentum * buf + g (buf = g on the first step, as PyTorch)."""

    def __init__(self, params, grads, n_decay: int, momentum: float = 0.9, weight_decay: float = 0.0):
        super().__init__(params, grads, n_decay, weight_decay)
        self.momentum = momentum
        self.buf = np.zeros_like(params)
        self.steps = 0

    def step(self, lr: float) -> None:
        self._decay()
        if self.momentum:
            if self.steps == 0:
                self.buf[...] = self.grads
            else:
                self.buf *= self.momentum
                self.buf += self.grads
            update = self.buf
        else:
            update = self.grads
        np.multiply(update, lr, out=self._tmp)
        self.params -= self._tmp
        self.steps += 1


class Adam(_Optimizer):
    """Adam (Kingma & Ba) with PyTorch's bias correction and epsilon placement."""

    def __init__(
        self,
        params,
        grads,
        n_decay: int,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(params, grads, n_decay, weight_decay)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.m = np.zeros_like(params)
        self.v = np.zeros_like(params)
        self.steps = 0

    def step(self, lr: float) -> None:
        self._decay()
        self.steps += 1
        g, m, v, tmp = self.grads, self.m, self.v, self._tmp
        m *= self.beta1
        m += (1.0 - self.beta1) * g  # m = β1 m + (1-β1) g
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - self.beta2
        v *= self.beta2
        v += tmp  # v = β2 v + (1-β2) g²
        bc1 = 1.0 - self.beta1**self.steps
        bc2 = 1.0 - self.beta2**self.steps
        np.sqrt(v, out=tmp)
        tmp *= 1.0 / math.sqrt(bc2)
        tmp += self.eps  # denominator sqrt(v / bc2) + eps
        np.divide(m, tmp, out=tmp)
        tmp *= lr / bc1
        self.params -= tmp


def make_optimizer(name: str, params, grads, n_decay: int, *, momentum: float, weight_decay: float):
    if name == "adam":
        return Adam(params, grads, n_decay, weight_decay=weight_decay)
    if name == "sgd":
        return SGD(params, grads, n_decay, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; known: {OPTIMIZERS}")


# ---------------------------------------------------------------------------------------------
# Naive references: the update rules per tensor, as printed in the PyTorch docs.


def sgd_step_naive(
    params: list[np.ndarray],
    grads: list[np.ndarray],
    bufs: list[np.ndarray | None],
    lr: float,
    momentum: float,
    decays: list[float],
) -> None:
    for p, g, i, wd in zip(params, grads, range(len(params)), decays, strict=False):
        g = g + wd * p
        if momentum:
            prev = bufs[i]
            g = g.copy() if prev is None else momentum * prev + g
            bufs[i] = g
        p -= lr * g


def adam_step_naive(
    params: list[np.ndarray],
    grads: list[np.ndarray],
    ms: list[np.ndarray],
    vs: list[np.ndarray],
    t: int,
    lr: float,
    decays: list[float],
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> None:
    """One step at 1-based step count ``t``; ``ms``/``vs`` are updated in place."""
    for p, g, m, v, wd in zip(params, grads, ms, vs, decays, strict=False):
        g = g + wd * p
        m[...] = beta1 * m + (1 - beta1) * g
        v[...] = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        p -= lr * m_hat / (np.sqrt(v_hat) + eps)
