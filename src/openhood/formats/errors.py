"""``ModelFileError``: a user-supplied model file that cannot be read, said in one sentence.

Every reader of a model file (safetensors weights, GGUF, ``openhood train`` checkpoints, pickle
refusals) raises a subclass of it with a message that names the file and what is wrong with it,
so the commands that load models (``serve``, ``embed``, ``generate``, ``batch``, …) catch one type
and print one line with exit code 2 instead of a traceback. The trade-off: the underlying
library's exception is kept only as text in the message (its traceback is noise to a user who
gave the wrong file), so a reader bug that surfaces as a format error shows less of itself.
"""

from __future__ import annotations


class ModelFileError(ValueError):
    """A model file is missing a part, damaged, or not in the format it claims; the message names it."""
