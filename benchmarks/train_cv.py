"""Choose a training recipe without the test set: 4-fold cross-validation over contiguous blocks.

The digits test tail (the last 360 of ``load_digits()``) is never used for a choice. The 1437
training rows are cut into 4 contiguous blocks (a block is a different set of writers, like the
test tail); each fold trains ``train_mlp`` on the other three and scores the held-out block, for
seeds 0..``--seeds``-1; a variant's figure is the mean over folds of the per-fold mean over
seeds. Variants are ``TrainConfig`` overrides, so every row is the library's own trainer
(docs/training.md's recipe tables; their rows that need code outside ``TrainConfig`` — EMA, SWA,
dropout, elastic distortion, deskewing — came from a one-off script and are marked there).

    PYTHONPATH=$PWD/src .venv/bin/python -u benchmarks/train_cv.py [--seeds 4] [--only default,ls0.2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

FOLDS = 4
# name → TrainConfig overrides (everything else is the default recipe)
VARIANTS: dict[str, dict] = {
    "default without label smoothing (the previous default)": {"label_smoothing": 0.0},
    "label smoothing 0.05": {"label_smoothing": 0.05},
    "label smoothing 0.1": {"label_smoothing": 0.1},
    "label smoothing 0.2 (the default)": {},
    "label smoothing 0.3": {"label_smoothing": 0.3},
    "label smoothing 0.2, 200 epochs": {"epochs": 200},
    "label smoothing 0.2, hidden 512": {"hidden": (512,)},
}


def block_cv(overrides: dict, seeds: int) -> list[float]:
    """Accuracy % of each held-out block, mean over seeds."""
    from openhood.train.data import load_digits_dataset
    from openhood.train.trainer import TrainConfig, evaluate, train_mlp

    ds = load_digits_dataset()
    x, y = ds.x_train, ds.y_train
    edges = np.linspace(0, len(y), FOLDS + 1).round().astype(int)
    folds = []
    for f in range(FOLDS):
        held = np.zeros(len(y), dtype=bool)
        held[edges[f] : edges[f + 1]] = True
        accs = []
        for seed in range(seeds):
            model, _ = train_mlp(
                x[~held], y[~held], 10, TrainConfig(seed=seed, **overrides), image_shape=ds.image_shape
            )
            accs.append(evaluate(model, model.scale(x[held]), y[held])[1])
        folds.append(100 * float(np.mean(accs)))
    return folds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--only", default="", help="comma list of substrings of variant names")
    args = p.parse_args()
    wanted = [s for s in args.only.split(",") if s]
    print(f"| variant ({FOLDS}-fold block CV, seeds 0-{args.seeds - 1}) | CV accuracy % | folds | seconds |")
    print("|---|---:|---|---:|")
    for name, overrides in VARIANTS.items():
        if wanted and not any(w in name for w in wanted):
            continue
        t0 = time.perf_counter()
        folds = block_cv(overrides, args.seeds)
        print(
            f"| {name} | {np.mean(folds):.2f} | {', '.join(f'{f:.1f}' for f in folds)} | {time.perf_counter() - t0:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
