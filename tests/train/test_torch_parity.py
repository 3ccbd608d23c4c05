"""One (and a second) training step equals PyTorch's in float64: loss, gradients, updated weights.

The fixture is ``scripts/make_train_fixture.py``'s output (PyTorch 2.13 CPU); torch is never
imported here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openhood.train.model import MLP
from openhood.train.optim import make_optimizer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "train_step_torch.npz"
TOL = 1e-6


@pytest.fixture(scope="module")
def ref():
    with np.load(FIXTURE, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def model_from(ref) -> MLP:
    sizes = tuple(int(s) for s in ref["sizes"])
    model = MLP(sizes, dtype=np.float64)
    for i in range(len(sizes) - 1):
        model.linears[i].weight[...] = ref[f"init.layers.{i}.weight"]
        model.linears[i].bias[...] = ref[f"init.layers.{i}.bias"]
    return model  # scaler left at identity: the fixture's inputs are used as they are


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_two_steps_match_pytorch(ref, name):
    model = model_from(ref)
    lr, momentum, wd = (float(v) for v in ref[f"{name}.hyper"])
    opt = make_optimizer(name, model.params, model.grads, model.n_decay, momentum=momentum, weight_decay=wd)
    for step in (1, 2):
        loss, _ = model.loss_and_grad(ref["x"], ref["y"])
        if step == 1:
            assert abs(loss - float(ref[f"{name}.loss"])) < TOL
            for i, lin in enumerate(model.linears):
                np.testing.assert_allclose(lin.grad_weight, ref[f"{name}.grad.layers.{i}.weight"], rtol=0, atol=TOL)
                np.testing.assert_allclose(lin.grad_bias, ref[f"{name}.grad.layers.{i}.bias"], rtol=0, atol=TOL)
        opt.step(lr)
        for i, lin in enumerate(model.linears):
            np.testing.assert_allclose(lin.weight, ref[f"{name}.step{step}.layers.{i}.weight"], rtol=0, atol=TOL)
            np.testing.assert_allclose(lin.bias, ref[f"{name}.step{step}.layers.{i}.bias"], rtol=0, atol=TOL)
    moved = np.abs(model.linears[0].weight - ref["init.layers.0.weight"]).max()
    assert moved > 100 * TOL  # the comparison is not vacuous: the step moved the weights
