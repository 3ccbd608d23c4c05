"""Read a PyTorch ``.pth`` checkpoint into NumPy arrays without torch and without running its code.

A ``.pth`` is a pickle, and unpickling a file runs whatever callables it names: ``torch.load``
on an untrusted file is arbitrary code execution. This reader uses its own unpickler whose
``find_class`` hands out only stand-ins for the handful of names a state dict needs:
``torch._utils._rebuild_tensor_v2`` (and ``_rebuild_tensor``, ``_rebuild_parameter``), the typed
storage classes (``torch.FloatStorage`` …) and ``collections.OrderedDict``. Any other global
(``os.system``, ``builtins.eval``, ``subprocess.Popen`` …) raises ``UnsafeCheckpointError``
before it is called, so the pickle's reduce never runs.

Both on-disk layouts are read:
- **zip** (torch >= 1.6): ``<root>/data.pkl`` plus one raw little-endian file per storage
  under ``<root>/data/<key>``;
- **legacy** (the older "pickle stream"): a magic-number pickle, a protocol-version pickle, a
  sys-info pickle, the object pickle, the list of storage keys, then each storage as an int64
  element count followed by its raw bytes, in that key order.

The trade-off: tensors are rebuilt lazily (a storage is only known after the object pickle in
the legacy layout), so the unpickler returns placeholders and the arrays are materialized in a
second pass; only dense, strided CPU tensors are supported (no sparse, quantized or
subclassed tensors), which is what model weights are.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

# typed storage class → element dtype. bfloat16 has no NumPy dtype: read as uint16 and widen.
STORAGE_DTYPES: dict[str, np.dtype[Any]] = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype("<u2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


class UnsafeCheckpointError(pickle.UnpicklingError):
    """The checkpoint names something other than tensor-rebuilding code."""


@dataclass(frozen=True)
class _StorageType:
    name: str

    @property
    def dtype(self) -> np.dtype[Any]:
        return STORAGE_DTYPES[self.name]


@dataclass
class _StorageRef:
    key: str
    storage_type: _StorageType
    numel: int
    data: np.ndarray | None = None  # filled from the archive / the stream's tail


@dataclass
class _TensorRef:
    storage: _StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    def materialize(self) -> np.ndarray:
        flat = self.storage.data
        if flat is None:
            raise pickle.UnpicklingError(f"storage {self.storage.key!r} has no data in the checkpoint")
        item = flat.itemsize
        if self.size and (
            self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride, strict=True)) >= flat.size
        ):
            raise pickle.UnpicklingError(f"tensor view runs past the end of storage {self.storage.key!r}")
        view = np.lib.stride_tricks.as_strided(
            flat[self.offset :], shape=self.size, strides=tuple(s * item for s in self.stride), writeable=False
        )
        arr = np.array(view, order="C")  # own C-ordered copy whatever the strides, native byte order below
        if self.storage.storage_type.name == "BFloat16Storage":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr.astype(arr.dtype.newbyteorder("="), copy=False)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    return _TensorRef(storage, int(storage_offset), tuple(int(n) for n in size), tuple(int(s) for s in stride))


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _rebuild_tensor_v2(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    return data  # an nn.Parameter is its tensor for inference


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the names in ``_ALLOWED``; storages come back as ``_StorageRef``s."""

    def __init__(self, file, storages: dict[str, _StorageRef]):
        super().__init__(file)
        self.storages = storages

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafeCheckpointError(
                f"checkpoint refers to {module}.{name}, which is not needed to rebuild tensors; refusing to load it "
                "(only state dicts of dense tensors can be converted)"
            ) from None

    def persistent_load(self, pid):
        # zip: ('storage', type, key, location, numel); legacy: the same plus view_metadata.
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
            raise UnsafeCheckpointError(f"unsupported persistent id in checkpoint: {pid!r:.80}")
        key = str(pid[2])
        if len(pid) > 5 and pid[5] is not None:
            raise UnsafeCheckpointError("storage views (legacy view_metadata) are not supported")
        ref = self.storages.get(key)
        if ref is None:
            ref = self.storages[key] = _StorageRef(key, pid[1], int(pid[4]))
        return ref


def _resolve(obj: Any) -> Any:
    """Replace every tensor placeholder in dicts/lists/tuples by its array."""
    if isinstance(obj, _TensorRef):
        return obj.materialize()
    if isinstance(obj, dict):
        return {k: _resolve(v) for k, v in obj.items()}  # insertion order kept
    if isinstance(obj, (list, tuple)):
        return type(obj)(_resolve(v) for v in obj)
    return obj


def _load_zip(path: Path) -> Any:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pkl) != 1:
            raise pickle.UnpicklingError(f"{path}: zip archive without exactly one data.pkl (found {len(pkl)})")
        root = pkl[0][: -len("data.pkl")]
        byteorder = zf.read(root + "byteorder").decode().strip() if root + "byteorder" in names else "little"
        storages: dict[str, _StorageRef] = {}
        obj = _RestrictedUnpickler(io.BytesIO(zf.read(pkl[0])), storages).load()
        for key, ref in storages.items():
            dtype = ref.storage_type.dtype.newbyteorder("<" if byteorder == "little" else ">")
            raw = zf.read(f"{root}data/{key}")
            if len(raw) < ref.numel * dtype.itemsize:
                raise pickle.UnpicklingError(
                    f"{path}: storage {key} has {len(raw)} bytes, expected {ref.numel * dtype.itemsize}"
                )
            ref.data = np.frombuffer(raw, dtype=dtype, count=ref.numel)
    return obj


def _load_legacy(path: Path) -> Any:
    with open(path, "rb") as f:
        magic = _RestrictedUnpickler(f, {}).load()
        if magic != LEGACY_MAGIC:
            raise pickle.UnpicklingError(f"{path}: not a PyTorch checkpoint (bad magic number)")
        _RestrictedUnpickler(f, {}).load()  # protocol version
        _RestrictedUnpickler(f, {}).load()  # sys info: endianness, type sizes
        storages: dict[str, _StorageRef] = {}
        obj = _RestrictedUnpickler(f, storages).load()
        keys = _RestrictedUnpickler(f, {}).load()
        if not isinstance(keys, list):
            raise pickle.UnpicklingError(f"{path}: storage key list missing")
        for key in keys:
            ref = storages.get(str(key))
            if ref is None:
                raise pickle.UnpicklingError(f"{path}: data for unknown storage {key!r}")
            head = f.read(8)
            if len(head) != 8:
                raise pickle.UnpicklingError(f"{path}: truncated storage {key!r}")
            (numel,) = struct.unpack("<q", head)
            dtype = ref.storage_type.dtype
            raw = f.read(numel * dtype.itemsize)
            if len(raw) != numel * dtype.itemsize:
                raise pickle.UnpicklingError(f"{path}: truncated storage {key!r}")
            ref.data = np.frombuffer(raw, dtype=dtype)
    return obj


def load_pth(path: str | Path) -> dict[str, np.ndarray]:
    """A ``.pth`` state dict → {name: array}, in the file's order. Raises ``UnsafeCheckpointError``
    for anything that is not plain tensor data, ``UnpicklingError`` for a damaged file."""
    path = Path(path)
    obj = _resolve(_load_zip(path) if zipfile.is_zipfile(path) else _load_legacy(path))
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]  # training checkpoints wrap the weights
    if not isinstance(obj, dict) or not all(isinstance(v, np.ndarray) for v in obj.values()):
        raise pickle.UnpicklingError(f"{path}: expected a state dict of tensors, got {type(obj).__name__}")
    return {str(k): v for k, v in obj.items()}
