"""``Task``: the four things a served model can do, one enum every layer names them by.

A task decides the routes a model gets (``server.routes``), its scheduler (the dynamic batcher
for single-pass tasks, the step scheduler for ``generate``) and its pre/postprocessors. The
values are the strings of the model file, ``/v1/models`` and the metrics' labels, and a
``StrEnum`` compares equal to them, so a task read from TOML or JSON needs no conversion. The
trade-off: adding a task means adding a member here, which is the point — nothing else spells
a task out.
"""

from __future__ import annotations

from enum import StrEnum


class Task(StrEnum):
    EMBED = "embed"  # text → one vector (mean pooling + L2 norm)
    CLASSIFY = "classify"  # feature vector → class probabilities
    IMAGE_CLASSIFY = "image-classify"  # image → class probabilities (and its pooled features)
    GENERATE = "generate"  # prompt → streamed continuation (step-scheduled, KV cache)

    @property
    def single_pass(self) -> bool:
        """One forward per item, batched by the dynamic batcher (everything but ``generate``)."""
        return self is not Task.GENERATE
