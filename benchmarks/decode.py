"""Decode benchmark: images/s of the shared-memory DecodePool against its peers, same run.

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/decode.py

Data: real photographs from Debian's ``mate-backgrounds`` package (downloaded with
``apt-get download`` and unpacked with ``dpkg-deb -x`` into ``--cache``, outside the repository,
the first time) plus variants generated from four of them: 1080p and 4K at JPEG quality
75/90/95, progressive, greyscale, and with an EXIF orientation (rotate 90°). Everything is read
into memory first; disk is not timed.

Compared, at 1, 2 and 4 workers, for full-size output (decode only) and model-size output
(ImageNet preprocessing: short side 256, centre crop 224):
- one process: decode in a loop (the anchor; "workers" does not apply),
- ``multiprocessing.Pool.imap``: arrays come back pickled through a pipe,
- openhood's ``DecodePool``: arrays stay in shared-memory slots, 28-byte headers on the pipe,
- PyTorch's ``DataLoader`` (peer, run in the reference env ``--ref-python`` as a subprocess):
  the same decode function in its workers, tensors handed over through torch's shared memory.
Every consumer only receives each image (the pool releases the slot at once). Each number is
the best of ``--rounds`` passes; the in-process methods are interleaved pass by pass.

Then: per-image time of full vs draft (reduced-size DCT) decoding at 1080p, and end to end:
decode + a CNN (a random-weight 5-conv network of ~2.4 GFLOP/image built with onnx.helper, run
by ONNX Runtime — not EfficientNet: the engine of the image-classification issue was not on
main when this ran) pipelined (``DecodePool.pipeline``) vs sequential (decode then infer in one
process). Absolute numbers move with the load of this shared 2-core machine; read the ratios.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from openhood.data.image import ImageSpec, decode, decode_reference, normalize, preprocess

SPEC = ImageSpec(resize_short=256, crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), resample="bilinear")
DRAFT_SPEC = ImageSpec(**{**SPEC.__dict__, "draft": True})
FULL_MAX_PIXELS = 3840 * 2160
ROOT = Path(__file__).resolve().parents[1]


# -- data -------------------------------------------------------------------------------------


def ensure_wallpapers(cache: Path) -> list[Path]:
    """The JPEG photographs of mate-backgrounds, downloaded and unpacked once into cache."""
    unpacked = cache / "x"
    if not list(unpacked.rglob("*.jpg")):
        deb_dir = cache / "deb"
        deb_dir.mkdir(parents=True, exist_ok=True)
        if not list(deb_dir.glob("mate-backgrounds_*.deb")):
            subprocess.run(["apt-get", "download", "mate-backgrounds"], cwd=deb_dir, check=True)
        deb = sorted(deb_dir.glob("mate-backgrounds_*.deb"))[-1]
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    photos = sorted(p for p in unpacked.rglob("*.jpg"))
    from PIL import Image

    return [p for p in photos if Image.open(p).size[0] * Image.open(p).size[1] <= FULL_MAX_PIXELS]


def ensure_variants(cache: Path, sources: list[Path]) -> list[Path]:
    """1080p and 4K at q75/90/95, progressive, greyscale and EXIF-rotated, from four photos."""
    from PIL import Image

    out_dir = cache / "variants"
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for src in sources[:4]:
        img = Image.open(src).convert("RGB")
        for name, size in (("1080p", (1920, 1080)), ("4k", (3840, 2160))):
            resized = img.resize(size, Image.Resampling.BICUBIC)
            for q in (75, 90, 95):
                made.append(_save(out_dir / f"{src.stem}-{name}-q{q}.jpg", resized, quality=q))
            if name == "1080p":
                made.append(_save(out_dir / f"{src.stem}-1080p-progressive.jpg", resized, quality=90, progressive=True))
                made.append(_save(out_dir / f"{src.stem}-1080p-grey.jpg", resized.convert("L"), quality=90))
                exif = resized.getexif()
                exif[0x0112] = 6  # display rotated 90° clockwise
                made.append(_save(out_dir / f"{src.stem}-1080p-exif6.jpg", resized, quality=90, exif=exif.tobytes()))
    return made


def _save(path: Path, img, **kw) -> Path:
    if not path.exists():
        img.save(path, "JPEG", **kw)
    return path


# -- decode functions (module level: multiprocessing and DataLoader workers import them) -------


def decode_full(data: bytes) -> np.ndarray:
    return decode(data, max_pixels=FULL_MAX_PIXELS)


def decode_model(data: bytes) -> np.ndarray:
    return preprocess(data, SPEC)


FUNCS = {"full": decode_full, "model": decode_model}


# -- methods ----------------------------------------------------------------------------------


def run_single(fn, datas):
    for d in datas:
        fn(d)


def run_pickle_pool(pool, fn, datas):
    for _ in pool.imap(fn, datas, chunksize=1):
        pass


def run_shm_pool(pool, datas):
    for d in pool.imap(datas):
        assert d.error is None, d.error


def best_rate(n_images: int, seconds: list[float]) -> float:
    return n_images / min(seconds)


def dataloader_role(args) -> None:
    """Runs in the reference env: the same decode functions inside torch DataLoader workers."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    datas = [Path(p).read_bytes() for p in json.loads(Path(args.files).read_text())]
    fn = FUNCS[args.output]

    class Images(Dataset):
        def __len__(self):
            return len(datas)

        def __getitem__(self, i):
            return torch.from_numpy(fn(datas[i]))

    torch.set_num_threads(1)
    loader = DataLoader(Images(), batch_size=None, num_workers=args.n, persistent_workers=True, prefetch_factor=2)
    for _ in loader:  # warm: workers started, caches hot
        pass
    times = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in loader:
            pass
        times.append(time.perf_counter() - t0)
    print(json.dumps({"rate": best_rate(len(datas), times)}))


def dataloader_rate(ref_python: str, files: Path, output: str, n: int, rounds: int) -> float | None:
    cmd = [
        ref_python,
        __file__,
        "--role",
        "dataloader",
        "--files",
        str(files),
        "--output",
        output,
        "--n",
        str(n),
        "--rounds",
        str(rounds),
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        print(f"DataLoader run failed: {proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["rate"]


# -- the measurements ---------------------------------------------------------------------------


def throughput_table(datas, files_json, args) -> None:
    from openhood.data.pool import DecodePool

    print(f"\n## Images/s (best of {args.rounds} passes over {len(datas)} images)\n")
    print(
        "| output | workers | one process | mp.Pool (pickle) | DecodePool (shm) | DataLoader | shm / one process | shm / pickle | shm / DataLoader |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for output in ("full", "model"):
        fn = FUNCS[output]
        for n in args.workers:
            times = {"single": [], "pickle": [], "shm": []}
            spec = None if output == "full" else SPEC
            with mp.get_context("fork").Pool(n) as ppool, DecodePool(spec, workers=n, slots=2 * n + 2) as spool:
                run_pickle_pool(ppool, fn, datas[:8])
                run_shm_pool(spool, datas[:8])
                methods = [
                    ("single", lambda fn=fn: run_single(fn, datas)),
                    ("pickle", lambda fn=fn: run_pickle_pool(ppool, fn, datas)),
                    ("shm", lambda: run_shm_pool(spool, datas)),
                ]
                for r in range(args.rounds):
                    for name, run in methods[r % 3 :] + methods[: r % 3]:  # rotate the order
                        t0 = time.perf_counter()
                        run()
                        times[name].append(time.perf_counter() - t0)
            single = best_rate(len(datas), times["single"])  # this row's anchor: same passes, same load
            pickle_rate = best_rate(len(datas), times["pickle"])
            shm_rate = best_rate(len(datas), times["shm"])
            dl = None if args.skip_dataloader else dataloader_rate(args.ref_python, files_json, output, n, args.rounds)
            dl_s = f"{dl:.1f}" if dl else "—"
            dl_ratio = f"{shm_rate / dl:.2f}×" if dl else "—"
            print(
                f"| {output} | {n} | {single:.1f} | {pickle_rate:.1f} | {shm_rate:.1f} | {dl_s} | "
                f"{shm_rate / single:.2f}× | {shm_rate / pickle_rate:.2f}× | {dl_ratio} |",
                flush=True,
            )


def median_ms(fn, data, repeats: int) -> float:
    fn(data)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(data)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def draft_table(files: list[Path], args) -> None:
    hd = [p.read_bytes() for p in files if "1080p-q" in p.name]
    rows = [
        ("Pillow, full decode", lambda d: decode_reference(d)),
        ("simplejpeg, full decode (openhood)", lambda d: decode(d)),
        ("Pillow, draft ≥256", lambda d: decode_reference(d, draft_short=256)),
        ("simplejpeg, draft ≥256 (openhood)", lambda d: decode(d, draft_short=256)),
        ("preprocess 256/224, full decode", lambda d: preprocess(d, SPEC)),
        ("preprocess 256/224, draft", lambda d: preprocess(d, DRAFT_SPEC)),
    ]
    print(f"\n## Per-image time, 1080p JPEG (median over {len(hd)} files × {args.rounds * 3} runs, one process)\n")
    print("| decode | ms / image | vs Pillow full |")
    print("|---|---:|---:|")
    base = None
    for name, fn in rows:
        ms = statistics.median(median_ms(fn, d, args.rounds * 3) for d in hd)
        base = base or ms
        print(f"| {name} | {ms:.2f} | {ms / base:.2f}× |")
    diffs = [np.abs(preprocess(d, SPEC).astype(int) - preprocess(d, DRAFT_SPEC).astype(int)) for d in hd]
    print(
        f"\nDraft vs full after preprocess 256/224: mean |Δ| {np.mean([x.mean() for x in diffs]):.2f}, "
        f"max |Δ| {max(int(x.max()) for x in diffs)} (uint8 levels). Top-1 parity is for the model to check."
    )


def small_cnn(path: Path) -> None:
    """A 5-conv CNN of ~2.4 GFLOP per 224² image, random weights: about as slow as one decode worker here."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev, c_in = [], [], "x", 3
    for i, (c_out, stride) in enumerate([(64, 2), (128, 2), (256, 2), (512, 2), (512, 1)]):
        w = (rng.standard_normal((c_out, c_in, 3, 3)) * np.sqrt(2 / (9 * c_in))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(c_out, np.float32), f"b{i}")]
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], strides=[stride] * 2),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        prev, c_in = f"r{i}", c_out
    fc = (rng.standard_normal((1000, c_in)) * 0.05).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "fc"), numpy_helper.from_array(np.zeros(1000, np.float32), "fcb")]
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def end_to_end(datas, cache: Path, args) -> None:
    import onnxruntime as ort

    from openhood.data.pool import DecodePool

    model = cache / "small_cnn.onnx"
    small_cnn(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # one core for inference, the other for the decode worker
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])

    def infer(x):  # float32 (B, 3, 224, 224) → (B, 1000)
        return sess.run(None, {"x": x})[0]

    b = args.batch
    pixels = np.stack([preprocess(d, SPEC) for d in datas[:b]])
    infer(normalize(pixels, SPEC))
    n = len(datas)
    res = {k: [] for k in ("decode", "infer", "sequential", "pipelined")}
    with DecodePool(SPEC, workers=args.e2e_workers, slots=2 * b) as pool:
        list(pool.batches(datas[:b], b))
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _batch in pool.batches(datas, b):
                pass
            res["decode"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in range(0, n, b):
                infer(normalize(pixels, SPEC))
            res["infer"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i in range(0, n, b):  # the naive loop: decode a batch, then infer it
                infer(normalize(np.stack([preprocess(d, SPEC) for d in datas[i : i + b]]), SPEC))
            res["sequential"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in pool.pipeline(datas, b, infer):
                pass
            res["pipelined"].append(time.perf_counter() - t0)
    rate = {k: best_rate(n, v) for k, v in res.items()}
    floor = min(rate["decode"], rate["infer"])
    print(
        f"\n## End to end: decode 256/224 + small CNN (ORT, 1 thread), batch {b}, {args.e2e_workers} decode worker(s)\n"
    )
    print("| stage | images/s | vs min(decode alone, inference alone) |")
    print("|---|---:|---:|")
    for k, label in (
        ("decode", "decode alone (DecodePool)"),
        ("infer", "inference alone"),
        ("sequential", "sequential (decode then infer, one process)"),
        ("pipelined", "pipelined (DecodePool.pipeline)"),
    ):
        print(f"| {label} | {rate[k]:.1f} | {rate[k] / floor:.2f}× |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/openhood/wallpapers")
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--e2e-workers", type=int, default=1)
    ap.add_argument("--ref-python", default="/work/main/.venv-ref/bin/python")
    ap.add_argument("--skip-dataloader", action="store_true")
    ap.add_argument("--role", choices=["dataloader"], help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "dataloader":
        return dataloader_role(args)

    from PIL import Image

    from openhood.data import shm

    photos = ensure_wallpapers(args.cache)
    files = photos + ensure_variants(args.cache, photos)
    files_json = args.cache / "files.json"
    files_json.write_text(json.dumps([str(p) for p in files]))
    datas = [p.read_bytes() for p in files]
    mpx = sum(np.prod(Image.open(io.BytesIO(d)).size) for d in datas) / 1e6
    print(
        f"Data: {len(photos)} mate-backgrounds photos + {len(files) - len(photos)} variants = {len(datas)} JPEGs, "
        f"{sum(map(len, datas)) / 2**20:.1f} MiB, {mpx:.0f} Mpx. Python {sys.version.split()[0]}, {os.cpu_count()} CPUs."
    )
    throughput_table(datas, files_json, args)
    draft_table(files, args)
    end_to_end(datas, args.cache, args)
    left = [n for n, pid in shm.owned_segments() if pid == os.getpid()]
    print(f"\nSegments of this run left in /dev/shm: {len(left)}")


if __name__ == "__main__":
    main()
