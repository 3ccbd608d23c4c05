"""``openhood convert SRC.pth OUT_DIR``: a PyTorch checkpoint → a safetensors model folder.

The checkpoint is read by ``openhood.formats.pth`` (a restricted unpickler: tensors only, no
code runs, no torch needed); the tensor names and shapes are checked against the one vision
architecture the engine knows (EfficientNet-Lite0); OUT_DIR gets ``model.safetensors`` (the
weights as stored, float32, BatchNorm not folded yet: folding happens at load, so the file
stays the checkpoint's own numbers) and ``config.json`` (architecture, preprocessing,
ImageNet labels, the source file's SHA-256). OUT_DIR is written under a temporary name and
renamed at the end, so a failed conversion never leaves a half folder. Errors are one line
on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import functools

from openhood.cli.validate import usage_error


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "convert", help="convert a PyTorch .pth checkpoint (EfficientNet-Lite0) into a safetensors model folder"
    )
    p.add_argument("source", metavar="SRC.pth", help="the checkpoint (zip or legacy format)")
    p.add_argument("output", metavar="OUT_DIR", help="folder to create (must not exist)")
    p.set_defaults(func=cmd_convert)


_fail = functools.partial(usage_error, "convert")


def cmd_convert(args: argparse.Namespace) -> int:
    import hashlib
    import json
    import pickle
    import shutil
    from pathlib import Path

    from safetensors.numpy import save_file

    from openhood.data.imagenet import imagenet_labels
    from openhood.engine.models import efficientnet
    from openhood.formats.pth import load_pth

    src, out = Path(args.source), Path(args.output)
    if not src.is_file():
        return _fail(f"{src}: no such file")
    if out.exists():
        return _fail(f"{out} already exists; choose a new folder")
    try:
        state = load_pth(src)
    except (pickle.UnpicklingError, EOFError, ValueError, OSError) as exc:
        return _fail(f"{src}: {exc}")
    # Training counters (BatchNorm's num_batches_tracked) are not weights.
    weights = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    try:
        config = efficientnet.architecture_config({k: v.shape for k, v in weights.items()})
    except ValueError as exc:
        return _fail(f"{src}: {exc}")
    config["image_size"] = efficientnet.PREPROCESSING["crop"]
    config["preprocessing"] = dict(efficientnet.PREPROCESSING)
    if config["num_classes"] == 1000:
        config["id2label"] = imagenet_labels()
    config["source"] = {"file": src.name, "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        save_file(
            {k: v.astype("float32", copy=False) for k, v in weights.items()}, str(tmp / efficientnet.WEIGHTS_FILE)
        )
        (tmp / efficientnet.CONFIG_FILE).write_text(json.dumps(config, indent=1) + "\n")
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = (out / efficientnet.WEIGHTS_FILE).stat().st_size
    print(
        f"wrote {out}: {len(weights)} tensors ({size / 1e6:.1f} MB), {config['architecture']}, {config['num_classes']} classes"
    )
    return 0
