"""``openhood train``: train the NumPy MLP and write a model folder.

    openhood train --dataset digits --out DIR        # 64 → 256 → 10 on the UCI digits
    openhood train --dataset digits28 --out DIR      # 784 → 256 → 10, digits upsampled to 28×28
    openhood train --data FILE.csv|.npz --out DIR    # your own features and labels

Prints one progress line per epoch (loss, accuracy); DIR gets ``model.safetensors`` +
``config.json``, ``training.svg`` (loss and accuracy per epoch), ``confusion.json`` and
``summary.json`` (test_accuracy, epochs, train_seconds). The folder is staged under a temporary
name and renamed when complete; bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

from openhood.cli.validate import usage_error


def register(subparsers) -> None:
    from openhood.train.config import TrainConfig  # light: parser building must not import NumPy

    d = TrainConfig()
    p = subparsers.add_parser("train", help="train the NumPy MLP (digits, digits28 or a CSV/NPZ file)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", choices=["digits", "digits28"])
    src.add_argument("--data", help=".csv (label in the last column) or .npz (x, y[, x_test, y_test])")
    p.add_argument("--out", required=True, help="output model folder")
    p.add_argument("--hidden", type=int, nargs="+", default=list(d.hidden))
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--optimizer", choices=["adam", "sgd"], default=d.optimizer)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--schedule", choices=["constant", "cosine", "step"], default=d.schedule)
    p.add_argument("--patience", type=int, default=d.patience, help="early stopping patience in epochs (0 = off)")
    p.add_argument("--validation-fraction", type=float, default=d.validation_fraction)
    p.add_argument("--no-augment", action="store_true", help="no affine jitter of image inputs")
    p.add_argument(
        "--label-smoothing",
        type=float,
        default=d.label_smoothing,
        help="ε of the training target (1 - ε) onehot + ε/K, in [0, 1) (0 = plain cross-entropy)",
    )
    p.add_argument("--test-fraction", type=float, default=0.2, help="--data only: tail held out as test set")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS threads (default 1: a 64-row batch is too small to split; 2 threads measured ~80x "
        "slower per step on a loaded machine)",
    )
    p.set_defaults(func=cmd_train)


_fail = functools.partial(usage_error, "train")


def cmd_train(args: argparse.Namespace) -> int:
    from openhood.engine.kernels.blas import blas
    from openhood.train.checkpoint import model_config, save_model, staged_folder
    from openhood.train.config import TrainConfig
    from openhood.train.data import DataError, load_dataset
    from openhood.train.metrics import accuracy, confusion_matrix
    from openhood.train.trainer import train_mlp

    if args.epochs < 1 or args.batch_size < 1 or min(args.hidden) < 1 or args.lr <= 0 or args.threads < 1:
        return _fail("--epochs, --batch-size, --hidden, --lr and --threads must be positive")
    if not 0.0 <= args.label_smoothing < 1.0:
        return _fail(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}")
    blas().set_threads_local(args.threads)
    try:
        ds = load_dataset(args.dataset, args.data, test_fraction=args.test_fraction)
    except DataError as exc:
        return _fail(str(exc))
    cfg = TrainConfig(
        hidden=tuple(args.hidden),
        epochs=args.epochs,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        lr=args.lr,
        weight_decay=args.weight_decay,
        schedule=args.schedule,
        patience=args.patience,
        validation_fraction=args.validation_fraction,
        augment=not args.no_augment,
        label_smoothing=args.label_smoothing,
        seed=args.seed,
    )

    def progress(e) -> None:
        done = int(20 * e.epoch / cfg.epochs)
        val = f" val_loss {e.val_loss:.4f} val_acc {e.val_accuracy:.4f}" if e.val_loss is not None else ""
        print(
            f"epoch {e.epoch:>4}/{cfg.epochs} [{'#' * done}{'.' * (20 - done)}] loss {e.train_loss:.4f} "
            f"acc {e.train_accuracy:.4f}{val} lr {e.lr:.2e} {e.seconds * 1e3:.0f} ms",
            file=sys.stderr,
            flush=True,
        )

    try:
        model, hist = train_mlp(
            ds.x_train, ds.y_train, ds.n_classes, cfg, image_shape=ds.image_shape, on_epoch=progress
        )
    except ValueError as exc:
        return _fail(str(exc))
    pred = model.predict_proba(ds.x_test).argmax(axis=1)
    test_acc = accuracy(ds.y_test, pred)
    summary = {
        "dataset": ds.name,
        "sizes": list(model.sizes),
        "test_accuracy": test_acc,
        "test_samples": len(ds.y_test),
        "epochs": len(hist.epochs),
        "best_epoch": hist.best_epoch,
        "stopped_early": hist.stopped_early,
        "train_seconds": hist.train_seconds,
        "config": cfg.to_dict(),
    }
    with staged_folder(args.out) as tmp:
        save_model(
            model,
            model_config(
                model,
                labels=[str(i) for i in range(ds.n_classes)],
                image_shape=ds.image_shape,
                extra={"dataset": ds.name, "train": cfg.to_dict()},
            ),
            tmp,
        )
        (tmp / "confusion.json").write_text(
            json.dumps(
                {
                    "rows": "true class",
                    "columns": "predicted class",
                    "matrix": confusion_matrix(ds.y_test, pred, ds.n_classes).tolist(),
                }
            )
            + "\n"
        )
        (tmp / "training.svg").write_text(plot_history(hist), encoding="utf-8")
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("test_accuracy", "epochs", "train_seconds")}))
    return 0


def plot_history(hist) -> str:
    """The loss and accuracy curves of a training ``History`` as one SVG (two stacked plots)."""
    from openhood.loadtest import svgplot

    ep = [e.epoch for e in hist.epochs]
    loss = svgplot.lines(
        [("train loss", ep, [e.train_loss for e in hist.epochs])]
        + ([("val loss", ep, [e.val_loss for e in hist.epochs])] if hist.epochs[0].val_loss is not None else []),
        title="loss per epoch",
        xlabel="epoch",
        ylabel="cross-entropy",
        plot_id="loss",
    )
    acc = svgplot.lines(
        [("train accuracy", ep, [e.train_accuracy for e in hist.epochs])]
        + (
            [("val accuracy", ep, [e.val_accuracy for e in hist.epochs])] if hist.epochs[0].val_loss is not None else []
        ),
        title="accuracy per epoch",
        xlabel="epoch",
        ylabel="accuracy",
        plot_id="accuracy",
    )
    w, h = svgplot.W, svgplot.H
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h}" viewBox="0 0 {w} {2 * h}">\n'
        f'<g>{loss}</g>\n<g transform="translate(0,{h})">{acc}</g>\n</svg>\n'
    )
