"""openhood.train: a NumPy MLP trained from scratch, backpropagation written by hand.

- ``layers``: Linear, ReLU, softmax + cross-entropy, forward and backward, naive references.
- ``model``: ``MLP``, every parameter in one flat buffer (weights first, then biases).
- ``optim``: SGD with momentum, Adam, L2 decay, learning-rate schedules (PyTorch's rules).
- ``trainer``: the seeded epoch loop with early stopping; ``augment``: affine jitter of images.
- ``config``: ``TrainConfig``, the recipe and its defaults (no NumPy: ``openhood train``'s parser reads it).
- ``data``: the bundled digits (8×8 and 28×28), CSV/NPZ files, input checks.
- ``checkpoint``: ``model.safetensors`` + ``config.json``, staged folders; ``metrics``.

A low layer: it imports nothing from the engine or serving; the engine builds its fused
inference graph from a saved folder (``openhood.engine.models.mlp.load_mlp``).
"""
