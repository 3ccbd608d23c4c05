"""The ``generate`` task: a decoder LLM's prompt → continuation loop, sampling, chat template.

``Generator`` is the Python API (also ``openhood.Generator``); ``openhood generate`` is its command.
"""

from openhood.generate.generator import GenerationConfig, GenerationResult, Generator
from openhood.generate.sampling import SamplingParams

__all__ = ["GenerationConfig", "GenerationResult", "Generator", "SamplingParams"]
