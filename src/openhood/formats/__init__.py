"""File formats: safetensors weights (never pickle), ONNX import, GGUF reading.

The lowest layer: reading and writing files, knowing nothing about serving or architectures.
"""
