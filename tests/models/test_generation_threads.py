"""The decoder's BLAS threads never exceed what one engine may use (no threads × workers)."""

from __future__ import annotations

import pytest

from openhood.models import EngineOptions
from openhood.models.generation import decoder_threads


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (EngineOptions(threads=2, workers=2), 2),  # `--threads 2` on 2 cores: 2, not 4
        (EngineOptions(threads=1, workers=2, wide_threads=2), 2),  # the defaults: every core
        (EngineOptions(threads=1, workers=1), 1),  # `--no-wide --threads 1`
        (EngineOptions(), 0),  # threads unset: BLAS's own default
    ],
)
def test_decoder_threads(options, expected):
    assert decoder_threads(options) == expected
