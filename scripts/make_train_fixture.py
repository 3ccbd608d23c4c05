"""One PyTorch training step, twice, on fixed data, for openhood.train's parity test.

openhood never imports torch; this script made ``tests/fixtures/train_step_torch.npz`` once in the
shared reference environment (PyTorch CPU, float64), so anyone can re-create and check it:

    /work/main/.venv-ref/bin/python scripts/make_train_fixture.py

A (6 → 5 → 4 → 3) ReLU MLP, 16 samples, integer labels, mean cross-entropy. Initial weights come
from NumPy (seeded) and are stored (in, out); PyTorch gets their transpose. For SGD (momentum 0.9)
and Adam, each with L2 weight decay on the weights only (biases in a group with decay 0, as
openhood does), the fixture holds the loss and gradients of the first step and the parameters
after steps 1 and 2 (two steps, so momentum and Adam's moments are exercised). Saved with
``np.savez`` of plain float64/int64 arrays: loadable with ``allow_pickle=False``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "train_step_torch.npz"
SIZES = (6, 5, 4, 3)
BATCH = 16
SETTINGS = {
    "sgd": {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "adam": {"lr": 0.01, "weight_decay": 0.01},
}


def main() -> None:
    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((BATCH, SIZES[0]))
    y = rng.integers(0, SIZES[-1], BATCH)
    init = {}
    for i, (fi, fo) in enumerate(itertools.pairwise(SIZES)):
        init[f"layers.{i}.weight"] = rng.standard_normal((fi, fo)) * np.sqrt(2.0 / fi)
        init[f"layers.{i}.bias"] = rng.standard_normal(fo) * 0.1
    out = {"x": x, "y": y.astype(np.int64), "sizes": np.asarray(SIZES, np.int64)}
    out.update({f"init.{k}": v for k, v in init.items()})
    for name, hp in SETTINGS.items():
        layers = []
        for i, (fi, fo) in enumerate(itertools.pairwise(SIZES)):
            lin = torch.nn.Linear(fi, fo)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(init[f"layers.{i}.weight"].T))
                lin.bias.copy_(torch.from_numpy(init[f"layers.{i}.bias"]))
            layers.append(lin)
            if i < len(SIZES) - 2:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers)
        linears = [m for m in net if isinstance(m, torch.nn.Linear)]
        groups = [
            {"params": [m.weight for m in linears], "weight_decay": hp["weight_decay"]},
            {"params": [m.bias for m in linears], "weight_decay": 0.0},
        ]
        if name == "sgd":
            opt = torch.optim.SGD(groups, lr=hp["lr"], momentum=hp["momentum"])
        else:
            opt = torch.optim.Adam(groups, lr=hp["lr"])
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        for step in (1, 2):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xt), yt)
            loss.backward()
            if step == 1:
                out[f"{name}.loss"] = np.asarray(loss.item())
                for i, m in enumerate(linears):
                    out[f"{name}.grad.layers.{i}.weight"] = m.weight.grad.numpy().T.copy()
                    out[f"{name}.grad.layers.{i}.bias"] = m.bias.grad.numpy().copy()
            opt.step()
            for i, m in enumerate(linears):
                out[f"{name}.step{step}.layers.{i}.weight"] = m.weight.detach().numpy().T.copy()
                out[f"{name}.step{step}.layers.{i}.bias"] = m.bias.detach().numpy().copy()
        out[f"{name}.hyper"] = np.asarray([hp["lr"], hp.get("momentum", 0.0), hp["weight_decay"]])
    out["torch_version"] = np.asarray(torch.__version__)
    np.savez(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(out)} arrays, torch {torch.__version__})")


if __name__ == "__main__":
    main()
