"""MLP layers with hand-written backward: Linear, ReLU, and softmax fused with cross-entropy.

Each layer keeps what its backward needs from its forward (Linear its input, ReLU its output)
and writes parameter gradients straight into views of the model's one flat gradient buffer
(``openhood.train.model``), so the optimizer updates every parameter with a handful of NumPy
calls instead of a loop over layers. Forward and backward are dtype-generic: float32 to train,
float64 for the finite-difference check and the PyTorch parity test.

Beside each fast kernel sits its naive reference (``*_naive``): the textbook formula, written
for reading, not speed; tests hold the fast path to it. The trade-off: layers are not general
autograd nodes (one input, one output, a fixed chain), which is all an MLP needs and keeps each
backward a few lines of visible calculus.
"""

from __future__ import annotations

import numpy as np


def he_normal(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    """He (Kaiming) initialisation for ReLU layers: N(0, 2 / fan_in), float64 (cast by the caller)."""
    return rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)


class Linear:
    """y = x @ W + b with W (in, out); weight and bias are views into the model's flat buffers."""

    def __init__(
        self,
        weight: np.ndarray,
        bias: np.ndarray,
        grad_weight: np.ndarray,
        grad_bias: np.ndarray,
        needs_input_grad: bool = True,
    ):
        self.weight, self.bias = weight, bias
        self.grad_weight, self.grad_bias = grad_weight, grad_bias
        self.needs_input_grad = needs_input_grad  # the first layer's dx would be thrown away
        self._x: np.ndarray = np.empty((0, 0))  # set by forward

    def forward(self, x: np.ndarray) -> np.ndarray:
        self._x = x  # (B, in), kept for dW
        y = x @ self.weight  # (B, out)
        y += self.bias
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray | None:
        # dL/dW = x^T dy (in, out); dL/db = sum_b dy (out,); dL/dx = dy W^T (B, in)
        np.matmul(self._x.T, dy, out=self.grad_weight)
        np.sum(dy, axis=0, out=self.grad_bias)
        return dy @ self.weight.T if self.needs_input_grad else None


class ReLU:
    """max(x, 0) in place; the backward mask is read from the output (y > 0 iff x > 0)."""

    def __init__(self) -> None:
        self._y: np.ndarray = np.empty((0, 0))  # set by forward

    def forward(self, x: np.ndarray) -> np.ndarray:
        np.maximum(x, 0, out=x)  # x is the previous Linear's fresh output: nobody else reads it
        self._y = x
        return x

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dy *= self._y > 0  # (B, H); the subgradient at 0 is 0, as in PyTorch
        return dy


class SoftmaxCrossEntropy:
    """Mean cross-entropy of softmax(logits) against integer labels, fused with its gradient.

    Fusing is the standard trick: d(mean CE)/dz = (softmax(z) - q) / B, with no division by p,
    so it stays exact where a probability underflows to 0. ``smoothing`` = ε is label smoothing
    (Szegedy et al. 2016, PyTorch's ``label_smoothing``): the target is q = (1 - ε) onehot(y) + ε/K
    instead of onehot(y), so the loss is (1 - ε) CE(y) + ε/K Σ_k CE(k). It keeps the logits from
    growing without bound on the training writers (measured better on unseen ones:
    docs/training.md); ε = 0 is plain cross-entropy, bit for bit.
    """

    def __init__(self, smoothing: float = 0.0) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = float(smoothing)
        self._probs: np.ndarray = np.empty((0, 0))  # set by forward
        self._labels: np.ndarray = np.empty(0, dtype=np.int64)

    def forward(self, logits: np.ndarray, labels: np.ndarray) -> float:
        z = logits - logits.max(axis=1, keepdims=True)  # (B, C), shifted: exp never overflows
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)  # (B, 1)
        rows = np.arange(z.shape[0])
        eps = self.smoothing
        if eps:
            # -Σ_k q_k log p_k = log s - (1 - ε) z_y - ε/K Σ_k z_k  (Σ_k q_k = 1)
            target = (1.0 - eps) * z[rows, labels] + (eps / z.shape[1]) * z.sum(axis=1)
            loss = float(np.mean(np.log(s[:, 0]) - target))
        else:
            loss = float(np.mean(np.log(s[:, 0]) - z[rows, labels]))
        e /= s
        self._probs, self._labels = e, labels
        return loss

    @property
    def probs(self) -> np.ndarray:
        return self._probs

    def backward(self) -> np.ndarray:
        d = self._probs  # reused as the gradient buffer: forward's probabilities are consumed here
        eps = self.smoothing
        if eps:
            d -= eps / d.shape[1]
        d[np.arange(d.shape[0]), self._labels] -= 1.0 - eps
        d *= 1.0 / d.shape[0]
        return d


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax (B, C) → (B, C), max-shifted."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


# ---------------------------------------------------------------------------------------------
# Naive references: the formulas, one element or one row at a time.


def linear_forward_naive(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("bi,io->bo", x, w) + b


def linear_backward_naive(x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dW, db, dx) from the chain rule written per element: dW[i, o] = Σ_b x[b, i] dy[b, o]."""
    batch, _fan_in = x.shape
    dw = np.zeros_like(w)
    for bi in range(batch):
        dw += np.outer(x[bi], dy[bi])
    db = np.array([sum(dy[bi, o] for bi in range(batch)) for o in range(w.shape[1])], dtype=dy.dtype)
    dx = np.einsum("bo,io->bi", dy, w)
    return dw, db, dx


def relu_forward_naive(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, 0).astype(x.dtype)


def relu_backward_naive(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    return np.where(x > 0, dy, 0).astype(dy.dtype)


def softmax_cross_entropy_naive(
    logits: np.ndarray, labels: np.ndarray, smoothing: float = 0.0
) -> tuple[float, np.ndarray]:
    """(mean loss, dL/dlogits) row by row: p = exp(z - max) / Σ exp(z - max); q = (1 - ε) onehot + ε/K;
    L = -Σ_k q_k log p_k; dL/dz = (p - q) / B."""
    batch, classes = logits.shape
    loss = 0.0
    grad = np.zeros_like(logits)
    for bi in range(batch):
        z = logits[bi] - max(logits[bi])
        log_p = z - np.log(np.sum(np.exp(z)))
        p = np.exp(log_p)
        q = np.full_like(p, smoothing / classes)
        q[labels[bi]] += 1.0 - smoothing
        loss += -np.sum(q * log_p)
        grad[bi] = (p - q) / batch
    return float(loss / batch), grad
