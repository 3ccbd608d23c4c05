"""Classification scores: accuracy and the confusion matrix (rows = true class, columns = predicted).

>>> confusion_matrix(np.array([0, 1, 1]), np.array([0, 1, 0]), 2).tolist()
[[1, 0], [1, 1]]
"""

from __future__ import annotations

import numpy as np


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(y_true == y_pred)) if len(y_true) else 0.0


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """(K, K) int64 counts; one bincount over the flattened (true, predicted) pairs."""
    return np.bincount(y_true * n_classes + y_pred, minlength=n_classes * n_classes).reshape(n_classes, n_classes)
