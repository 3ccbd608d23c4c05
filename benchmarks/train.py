"""Training and inference benchmark of the NumPy MLP: openhood vs scikit-learn vs PyTorch vs ONNX Runtime.

    PYTHONPATH=$PWD/src flock /tmp/openhood-bench.lock /work/main/.venv-ref/bin/python \\
        benchmarks/train.py --threads 1 --seeds 5 --plot docs/img/training_digits.svg

(the reference env has scikit-learn, torch and onnxruntime; a peer that is missing is skipped).
Four parts, all in one process, every contender limited to ``--threads`` threads (BLAS through
threadpoolctl, ``torch.set_num_threads``, ORT intra-op threads):

1. **Accuracy**: the default recipe (``openhood train --dataset digits``) over ``--seeds`` seeds:
   test accuracy on the held-out last 360 digits, mean ± std, and the seconds per run.
2. **Training speed**: the same 64 → 256 → 10 MLP, the same split, epochs, batch size, Adam,
   learning rate and L2 decay, no augmentation, no label smoothing and a constant learning rate (scikit-learn has
   neither jitter nor a cosine schedule), trained by openhood, by ``sklearn.neural_network.
   MLPClassifier`` and by a plain PyTorch loop, each over ``--train-seeds`` seeds; mean wall time
   as ratios to openhood, test accuracy mean ± std over the seeds.
3. **Inference** of the 784 → 256 → 10 MLP at batch 1, 64, 1024: openhood's engine (fused
   Linear+ReLU, Linear+Softmax, each one call of ``engine.kernels.panel_gemm``'s pre-packed kernel with
   the bias and activation on its register tile; and once more with ``np.matmul`` + the row
   kernels for both layers, the "BLAS" row) vs ONNX Runtime running its ONNX export vs
   PyTorch; calls are
   interleaved, median of ``--rounds``; GFLOP/s and % of the float32 GEMM peak measured here
   (a 1536³ numpy matmul with the same threads).
4. **Per-op table**: the textbook forward pass one NumPy line at a time (``x @ W1``, ``+ b1``,
   ReLU, ``@ W2``, ``+ b2``, softmax) at batch 64 and 1024: the share of each line, testing the
   article's "x @ W1 dominates, ReLU + softmax < 10 %".

Absolute times move with the load of this shared machine; the ratios are the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # PyTorch's OpenMP threads: no busy-wait between calls
ROOT = Path(__file__).resolve().parents[1]
SIZES = (784, 256, 10)
BATCHES = (1, 64, 1024)


def optional(name: str):
    try:
        return __import__(name)
    except ImportError:
        print(f"({name} not installed: its column is skipped)", file=sys.stderr)
        return None


def mean_std(values: list[float]) -> str:
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.pstdev(values):.2f}"


# --- 1. accuracy of the default recipe ---------------------------------------------------------


def accuracy_over_seeds(seeds: int, plot: Path | None) -> None:
    from openhood.train.config import TrainConfig
    from openhood.train.data import load_digits_dataset
    from openhood.train.trainer import train_mlp

    ds = load_digits_dataset()
    accs, secs = [], []
    for seed in range(seeds):
        cfg = TrainConfig(seed=seed)
        model, hist = train_mlp(ds.x_train, ds.y_train, 10, cfg, image_shape=ds.image_shape)
        accs.append(float((model.predict_proba(ds.x_test).argmax(1) == ds.y_test).mean()))
        secs.append(hist.train_seconds)
        if seed == 0 and plot is not None:
            from openhood.cli.train import plot_history

            plot.parent.mkdir(parents=True, exist_ok=True)
            plot.write_text(plot_history(hist), encoding="utf-8")
    print(f"\n## 1. Default recipe on digits (test = last 360 of load_digits), {seeds} seeds")
    print(f"recipe: {TrainConfig().to_dict()}")
    print("| seed | test accuracy % |\n|---:|---:|")
    for s, a in enumerate(accs):
        print(f"| {s} | {100 * a:.2f} |")
    print(f"\n**mean ± std: {mean_std(accs)} %**, {statistics.mean(secs):.2f} s per run (goal >= 97.5 %)")


# --- 2. training speed against scikit-learn and PyTorch ----------------------------------------


def train_openhood(ds, epochs, batch, lr, wd, seed):
    from openhood.train.config import TrainConfig
    from openhood.train.trainer import train_mlp

    cfg = TrainConfig(
        hidden=(256,),
        epochs=epochs,
        batch_size=batch,
        lr=lr,
        weight_decay=wd,
        schedule="constant",
        augment=False,
        label_smoothing=0.0,  # the peers minimise plain cross-entropy: the same recipe on every side
        seed=seed,
    )
    t0 = time.perf_counter()
    model, _ = train_mlp(ds.x_train, ds.y_train, 10, cfg)
    seconds = time.perf_counter() - t0
    return seconds, float((model.predict_proba(ds.x_test).argmax(1) == ds.y_test).mean())


def standardise(ds):
    mean, std = ds.x_train.mean(axis=0), ds.x_train.std()  # the same scaler openhood fits
    return ((ds.x_train - mean) / std).astype(np.float32), ((ds.x_test - mean) / std).astype(np.float32)


def train_sklearn(ds, epochs, batch, lr, wd, seed):
    from sklearn.neural_network import MLPClassifier

    t0 = time.perf_counter()
    xtr, xte = standardise(ds)
    # sklearn's penalty is alpha/2 ||W||² / batch: alpha = wd * batch gives openhood's gradient wd * W.
    clf = MLPClassifier(
        hidden_layer_sizes=(256,),
        solver="adam",
        batch_size=batch,
        learning_rate_init=lr,
        alpha=wd * batch,
        max_iter=epochs,
        tol=0.0,
        n_iter_no_change=epochs + 1,
        shuffle=True,
        random_state=seed,
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "max_iter reached": that is the point
        clf.fit(xtr, ds.y_train)
    seconds = time.perf_counter() - t0
    return seconds, float((clf.predict(xte) == ds.y_test).mean())


def train_torch(ds, epochs, batch, lr, wd, seed):
    import torch

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    xtr, xte = standardise(ds)
    x, y = torch.from_numpy(xtr), torch.from_numpy(ds.y_train)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=wd)  # L2 on biases too: PyTorch's plain loop
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for s in range(0, len(y), batch):
            idx = order[s : s + batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
    with torch.no_grad():
        pred = net(torch.from_numpy(xte)).argmax(1).numpy()
    seconds = time.perf_counter() - t0
    return seconds, float((pred == ds.y_test).mean())


def training_speed(epochs: int, batch: int, lr: float, wd: float, seeds: int) -> None:
    from openhood.train.data import load_digits_dataset

    ds = load_digits_dataset()
    rows = [("openhood (NumPy, hand-written backward)", train_openhood)]
    if optional("sklearn"):
        rows.append(("scikit-learn MLPClassifier", train_sklearn))
    if optional("torch"):
        rows.append(("PyTorch loop (nn.Sequential + Adam)", train_torch))
    # Seeds interleaved across trainers (seed 0 of each, then seed 1, …): one accuracy is one
    # seed's luck (one test image = 0.28 points), the mean over seeds is the comparison.
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in rows}
    for seed in range(seeds):
        for name, fn in rows:
            runs[name].append(fn(ds, epochs, batch, lr, wd, seed))
    base = statistics.mean(s for s, _ in runs[rows[0][0]])
    print(
        f"\n## 2. Training 64 → 256 → 10 on digits: {epochs} epochs, batch {batch}, Adam lr {lr}, L2 {wd}, constant LR, "
        f"no augmentation, no label smoothing, same split; seeds 0..{seeds - 1} (mean wall time, accuracy mean ± std)"
    )
    print("| trainer | wall s | time / openhood | test accuracy % | per seed |\n|---|---:|---:|---:|---|")
    for name, res in runs.items():
        s = statistics.mean(t for t, _ in res)
        per_seed = ", ".join(f"{100 * a:.2f}" for _, a in res)
        print(f"| {name} | {s:.2f} | {s / base:.2f}× | {mean_std([a for _, a in res])} | {per_seed} |")


# --- 3. inference of 784 → 256 → 10 --------------------------------------------------------------


def inference(threads: int, rounds: int) -> None:
    from openhood.backends import prepare_graph
    from openhood.backends.ort_session import make_session
    from openhood.engine.graph.profiler import measure_gemm_peak
    from openhood.engine.graph.runtime import Executor
    from openhood.engine.models.mlp import INPUT_NAME, build_mlp
    from openhood.export.onnx_export import graph_to_onnx

    peak = measure_gemm_peak()
    flops_per_row = 2 * (SIZES[0] * SIZES[1] + SIZES[1] * SIZES[2])
    fused, unfused = prepare_graph(build_mlp(SIZES)), build_mlp(SIZES)
    fused_blas = prepare_graph(build_mlp(SIZES, packed=False))  # np.matmul (OpenBLAS) + row kernels
    contenders = {}
    executors = [Executor(g, threads) for g in (fused, fused_blas, unfused)]
    ex_fused, ex_blas, ex_unfused = executors
    contenders["openhood engine (fused)"] = lambda x: ex_fused.run({INPUT_NAME: x})["probs"]
    contenders["openhood engine (fused, BLAS)"] = lambda x: ex_blas.run({INPUT_NAME: x})["probs"]
    contenders["openhood engine (unfused)"] = lambda x: ex_unfused.run({INPUT_NAME: x})["probs"]
    sess = make_session(graph_to_onnx(fused).SerializeToString(), threads=threads)
    contenders["onnxruntime"] = lambda x: sess.run(None, {INPUT_NAME: x})[0]
    torch = optional("torch")
    if torch is not None:
        torch.set_num_threads(threads)
        lins = [n.linear for n in unfused.nodes if n.op == "Linear"]
        net = torch.nn.Sequential(
            torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10), torch.nn.Softmax(-1)
        )
        with torch.no_grad():
            for layer, lin in zip((net[0], net[2]), lins, strict=True):
                layer.weight.copy_(torch.from_numpy(lin.weight.T.copy()))
                layer.bias.copy_(torch.from_numpy(lin.bias))
        net.eval()

        def run_torch(x):
            with torch.inference_mode():
                return net(torch.from_numpy(x)).numpy()

        contenders["pytorch"] = run_torch
    rng = np.random.default_rng(0)
    inputs = {b: rng.uniform(0, 1, (b, SIZES[0])).astype(np.float32) for b in BATCHES}
    ref = {b: contenders["onnxruntime"](x) for b, x in inputs.items()}
    for name, fn in contenders.items():  # parity before timing: same weights, same answer
        err = max(float(np.max(np.abs(fn(x) - ref[b]))) for b, x in inputs.items())
        assert err < 1e-5, f"{name} differs from onnxruntime by {err}"
    times = {(n, b): [] for n in contenders for b in BATCHES}
    names = list(contenders)
    for r in range(rounds):
        for b in BATCHES:
            reps = max(1, 2048 // b)
            for n in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order each round
                t0 = time.perf_counter()
                for _ in range(reps):
                    contenders[n](inputs[b])
                times[(n, b)].append((time.perf_counter() - t0) / reps)
    print(
        f"\n## 3. Inference 784 → 256 → 10, {threads} thread(s), median of {rounds} interleaved rounds; "
        f"measured float32 GEMM peak {peak:.1f} GFLOP/s"
    )
    print("| batch | contender | µs / call | GFLOP/s | % of peak | speed vs ORT |\n|---:|---|---:|---:|---:|---:|")
    for b in BATCHES:
        ort = statistics.median(times[("onnxruntime", b)])
        for n in names:
            t = statistics.median(times[(n, b)])
            gf = flops_per_row * b / t / 1e9
            print(f"| {b} | {n} | {t * 1e6:.1f} | {gf:.1f} | {100 * gf / peak:.0f} % | {ort / t:.2f}× |")
    for ex in executors:
        ex.close()


# --- 4. per-line timing of the textbook forward pass ---------------------------------------------


def per_op(rounds: int) -> None:
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((784, 256), dtype=np.float32) * np.float32(0.05)
    b1 = rng.standard_normal(256, dtype=np.float32)
    w2 = rng.standard_normal((256, 10), dtype=np.float32) * np.float32(0.1)
    b2 = rng.standard_normal(10, dtype=np.float32)
    steps = [
        ("x @ W1", lambda v: v["x"] @ w1, "h"),
        ("+ b1", lambda v: v["h"] + b1, "h"),
        ("ReLU", lambda v: np.maximum(v["h"], 0), "h"),
        ("h @ W2", lambda v: v["h"] @ w2, "z"),
        ("+ b2", lambda v: v["z"] + b2, "z"),
        (
            "softmax",
            lambda v: (lambda e: e / e.sum(axis=1, keepdims=True))(np.exp(v["z"] - v["z"].max(axis=1, keepdims=True))),
            "p",
        ),
    ]
    print("\n## 4. The textbook forward pass, one NumPy line at a time (share of the pass)")
    for b in (64, 1024):
        vals = {"x": rng.uniform(0, 1, (b, 784)).astype(np.float32)}
        spent = {name: [] for name, _, _ in steps}
        for _ in range(rounds * 20):
            for name, fn, out in steps:
                t0 = time.perf_counter()
                vals[out] = fn(vals)
                spent[name].append(time.perf_counter() - t0)
        med = {n: statistics.median(v) for n, v in spent.items()}
        total = sum(med.values())
        print(f"\nbatch {b}: {total * 1e6:.1f} µs per pass")
        print("| line | µs | share |\n|---|---:|---:|")
        for n, t in med.items():
            print(f"| {n} | {t * 1e6:.1f} | {100 * t / total:.1f} % |")
        print(
            f"| ReLU + softmax | {(med['ReLU'] + med['softmax']) * 1e6:.1f} | {100 * (med['ReLU'] + med['softmax']) / total:.1f} % |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=5, help="seeds of part 1 (accuracy of the default recipe)")
    ap.add_argument("--train-seeds", type=int, default=5, help="seeds per trainer in part 2")
    ap.add_argument("--epochs", type=int, default=100, help="epochs of the training-speed comparison")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--plot", type=Path, help="write the seed-0 training curve (SVG) here")
    ap.add_argument("--parts", default="1234", help="which parts to run, e.g. 34")
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    from openhood.engine.kernels.blas import blas

    with threadpool_limits(limits=args.threads):
        print(f"# benchmarks/train.py  threads {args.threads}  BLAS {blas().describe()}  load {os.getloadavg()[0]:.1f}")
        if "1" in args.parts:
            accuracy_over_seeds(args.seeds, args.plot)
        if "2" in args.parts:
            training_speed(args.epochs, 64, 1e-3, 1e-4, args.train_seeds)
        if "3" in args.parts:
            inference(args.threads, args.rounds)
        if "4" in args.parts:
            per_op(args.rounds)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
