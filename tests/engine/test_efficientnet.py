"""EfficientNet-Lite0 in the NumPy engine: PyTorch parity, fusion exactness, golden photos."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.data import image
from openhood.data.image import ImageSpec
from openhood.engine.graph.runtime import Executor
from openhood.engine.models import efficientnet


@pytest.fixture(scope="module")
def pixels(vision_reference, effnet):
    paths, _, pixel_sums = vision_reference
    x = effnet.pixels([p.read_bytes() for p in paths])  # (7, 224, 224, 3)
    # The fixture's logits were computed on these exact pixels; a change here is a
    # preprocessing change, not an engine error.
    assert np.allclose(x.astype(np.float64).sum(axis=(1, 2, 3)), pixel_sums, rtol=0, atol=1e-2)
    return x


def run(graph, x):
    with Executor(graph, threads=2) as ex:
        return ex.run({efficientnet.INPUT_NAME: x})


@pytest.fixture(scope="module")
def fused_out(effnet, pixels):
    return run(effnet.graph(fused=True), pixels)


def test_config_written_by_convert(effnet):
    cfg = effnet.config
    assert cfg["architecture"] == "efficientnet-lite0" and cfg["num_classes"] == 1000
    assert cfg["preprocessing"] == efficientnet.PREPROCESSING
    assert len(cfg["id2label"]) == 1000 and cfg["id2label"][281] == "tabby"
    assert len(cfg["source"]["sha256"]) == 64


def test_fusion_removes_every_batchnorm_activation_and_add(effnet):
    from openhood.engine.graph.fusion import CNN_PASSES, fuse

    unfused = effnet.graph(fused=False)
    convs = fuse(unfused, [p for p in CNN_PASSES if p != "mbconv"])  # every conv with its epilogue
    count = lambda g, label: sum(n.label == label for n in g.nodes)  # noqa: E731
    assert count(unfused, "BatchNorm") == 49 and count(unfused, "Relu6") == 33 and count(unfused, "Add") == 9
    assert {n.op for n in convs.nodes} == {"Conv", "DepthwiseConv", "GlobalAvgPool", "Linear"}
    assert count(convs, "Conv+Relu6") == 17 and count(convs, "DepthwiseConv+Relu6") == 16
    assert sum(len(n.inputs) == 2 for n in convs.nodes if n.op == "Conv") == 9  # residual in the epilogue
    assert len(convs.nodes) == 1 + 16 * 2 + 15 + 3
    # ... then each inverted-residual block becomes one node: stem, 16 blocks, head, pool, classifier
    fused = effnet.graph(fused=True)
    assert [n.op for n in fused.nodes] == ["Conv"] + ["MBConv"] * 16 + ["Conv", "GlobalAvgPool", "Linear"]
    blocks = fused.nodes[1:17]
    assert [len(b.attrs["parts"]) for b in blocks] == [2] + [3] * 15  # block 0 has no expansion
    assert sum(len(b.inputs) == 2 for b in blocks) == 9  # the skip connections
    assert [(b.attrs["kernel"], b.attrs["stride"]) for b in blocks] == [
        (s.kernel, s.stride) for s in efficientnet.blocks()
    ]


def test_logits_match_pytorch(fused_out, vision_reference):
    _, ref_logits, _ = vision_reference
    logits = fused_out["logits"]
    assert np.max(np.abs(logits - ref_logits)) <= 1e-3
    assert np.array_equal(logits.argmax(axis=1), ref_logits.argmax(axis=1))


def test_fused_equals_unfused(effnet, pixels, fused_out):
    unfused = run(effnet.graph(fused=False), pixels[:2])
    assert np.max(np.abs(unfused["logits"] - fused_out["logits"][:2])) <= 1e-4
    assert np.max(np.abs(unfused["features"] - fused_out["features"][:2])) <= 1e-4


def test_batch_of_one_equals_batch(effnet, pixels, fused_out):
    one = run(effnet.graph(), pixels[3:4])
    assert np.max(np.abs(one["logits"] - fused_out["logits"][3:4])) <= 1e-4


def test_batch_one_split_over_two_threads_equals_one_thread_and_unfused(effnet, pixels, monkeypatch):
    # At the default threshold every batch-1 block is split (bands, or hidden channels with a
    # partial-sum projection) and so is the head (by output channel); one thread splits nothing.
    from openhood.engine.graph import conv

    assert conv.MIN_PARALLEL_CONV <= 1 << 23  # the batch-1 blocks hold 10-33 M multiply-adds
    x = pixels[5:6]
    regions = []
    graph = effnet.graph(fused=True)
    with Executor(graph, threads=2) as ex:
        run_chunks = ex.splitter.run_chunks
        monkeypatch.setattr(ex.splitter, "run_chunks", lambda fn, n, *a: regions.append(n) or run_chunks(fn, n, *a))
        two = ex.run({efficientnet.INPUT_NAME: x})
    with Executor(graph, threads=1) as ex:
        one = ex.run({efficientnet.INPUT_NAME: x})
    unfused = run(effnet.graph(fused=False), x)
    assert sum(n > 1 for n in regions) >= 17  # stem, 16 blocks and the head took both threads
    assert np.max(np.abs(two["logits"] - one["logits"])) <= 1e-4
    assert np.max(np.abs(two["logits"] - unfused["logits"])) <= 1e-4


def test_probs_head_is_fused_linear_softmax(effnet, pixels, fused_out):
    graph = effnet.graph(head="probs")
    assert graph.nodes[-1].label == "Linear+Softmax" and graph.outputs == ("features", "probs")
    probs = run(graph, pixels[:2])["probs"]
    logits = fused_out["logits"][:2].astype(np.float64)
    ref = np.exp(logits - logits.max(1, keepdims=True))
    assert np.max(np.abs(probs - ref / ref.sum(1, keepdims=True))) <= 1e-5


# Photos with known content → ImageNet classes that must be the top-1 (or in the top-5).
GOLDEN = {
    "chelsea": ({"Egyptian cat", "tabby", "tiger cat"}, {"Egyptian cat", "tabby", "tiger cat"}),
    "coffee": ({"espresso"}, {"cup", "coffee mug"}),
    "china": ({"palace", "bell cote", "monastery"}, {"palace", "monastery"}),
    "flower": ({"daisy"}, {"daisy"}),
    "motorcycle": ({"moped", "motor scooter"}, {"motor scooter", "crash helmet"}),
    "rocket": ({"drilling platform", "missile", "projectile", "space shuttle"}, {"missile", "space shuttle"}),
}


def test_golden_top5_on_real_photos(effnet, fused_out, vision_reference):
    paths, _, _ = vision_reference
    labels = effnet.labels
    for path, row in zip(paths, fused_out["logits"], strict=True):
        if path.stem not in GOLDEN:
            continue
        top5 = [labels[i] for i in np.argsort(-row)[:5]]
        top1_ok, top5_need = GOLDEN[path.stem]
        assert top5[0] in top1_ok, (path.stem, top5)
        assert top5_need & set(top5), (path.stem, top5)


def test_preprocessing_convention_is_the_trained_one(effnet, pixels, fused_out, vision_reference):
    """TF EfficientNet-Lite's (x - 127) / 128 on RGB is what the weights expect: on the photos it
    is more confident than ImageNet mean/std or BGR order."""
    paths, _, _ = vision_reference

    def mean_top1(logits):
        e = np.exp(logits - logits.max(1, keepdims=True))
        return float((e / e.sum(1, keepdims=True)).max(1).mean())

    ours = mean_top1(fused_out["logits"])
    torchvision_style = ImageSpec(256, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "bilinear", layout="NHWC")
    other = image.normalize(
        np.stack([image.preprocess(p.read_bytes(), torchvision_style) for p in paths]), torchvision_style
    )
    assert ours > mean_top1(run(effnet.graph(), other)["logits"]) + 0.05
    assert ours > mean_top1(run(effnet.graph(), np.ascontiguousarray(pixels[..., ::-1]))["logits"]) + 0.02


def test_mismatched_checkpoint_is_refused(effnet):
    shapes = {k: v.shape for k, v in effnet.weights.items()}
    shapes["_blocks.3._depthwise_conv.weight"] = (144, 1, 3, 3)
    with pytest.raises(
        ValueError, match=r"_blocks.3._depthwise_conv.weight has shape \(144, 1, 3, 3\), expected \(144, 1, 5, 5\)"
    ):
        efficientnet.architecture_config(shapes)
    shapes["_blocks.3._depthwise_conv.weight"] = (144, 1, 5, 5)
    del shapes["_fc.bias"]
    with pytest.raises(ValueError, match="missing"):
        efficientnet.architecture_config(shapes)


def test_orientation_modes_and_alpha_reach_the_model_correctly(effnet, vision_reference):
    """EXIF-rotated, RGBA, CMYK and greyscale versions of the cat photo classify as the original."""
    from PIL import Image

    from tests.data.images import encode

    paths, _, _ = vision_reference
    rgb = np.asarray(Image.open(next(p for p in paths if p.stem == "chelsea")).convert("RGB"))
    cats = {"Egyptian cat", "tabby", "tiger cat"}
    # Stored turned 90° counter-clockwise; EXIF orientation 6 says "display rotated 90° clockwise".
    rotated = encode(np.ascontiguousarray(np.rot90(rgb, k=1)), "PNG", exif=_orientation_exif(6))
    opaque = encode(Image.fromarray(rgb).convert("RGBA"), "PNG")
    variants = [
        encode(rgb, "PNG"),
        rotated,
        opaque,
        encode(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95),
        encode(Image.fromarray(rgb).convert("L"), "PNG"),
    ]
    with Executor(effnet.graph(), threads=2) as ex:
        logits = ex.run({efficientnet.INPUT_NAME: effnet.pixels(variants)})["logits"]
    assert np.max(np.abs(logits[1] - logits[0])) < 1e-4  # orientation honoured
    assert np.max(np.abs(logits[2] - logits[0])) < 1e-4  # opaque alpha changes nothing
    for row in logits:
        top5 = {effnet.labels[i] for i in np.argsort(-row)[:5]}
        assert top5 & cats


def _orientation_exif(value: int):
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


@pytest.mark.parametrize("fused", [True, False])
def test_onnx_export_runs_in_onnxruntime_with_the_same_logits(
    effnet_dir, effnet, pixels, fused_out, vision_reference, tmp_path, fused
):
    import onnxruntime as ort

    from openhood.cli import main

    path = tmp_path / "effnet.onnx"
    assert main(["export", "--model", str(effnet_dir), "--output", str(path)] + ([] if fused else ["--no-fusion"])) == 0
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    features, logits = session.run(["features", "logits"], {efficientnet.INPUT_NAME: pixels})
    _, ref_logits, _ = vision_reference
    assert np.max(np.abs(logits - fused_out["logits"])) <= 1e-3
    assert np.max(np.abs(features - fused_out["features"])) <= 1e-3
    assert np.max(np.abs(logits - ref_logits)) <= 1e-3
    assert np.array_equal(logits.argmax(1), ref_logits.argmax(1))


def test_profile_ops_shows_unfused_vs_fused_per_block(effnet_dir, capsys):
    from openhood.cli import main

    assert main(["profile-ops", "--model", str(effnet_dir), "--batch", "1", "--runs", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "BatchNorm" in out and "MBConv" in out  # both op tables
    rows = {line.split()[0]: line.split() for line in out.split("per block")[1].splitlines()[2:] if line.strip()}
    assert list(rows)[:3] == ["stem", "blocks.0", "blocks.1"] and "blocks.15" in rows and "head" in rows
    unfused, fused = float(rows["total"][1]), float(rows["total"][2])
    assert unfused > 0 and fused > 0 and rows["total"][3].endswith("x")
