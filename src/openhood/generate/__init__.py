"""The ``generate`` task: a decoder LLM's prompt → continuation loop, sampling, chat template."""
