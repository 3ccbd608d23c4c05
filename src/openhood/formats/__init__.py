"""File formats: safetensors weights (never pickle) and ONNX import.

The lowest layer: reading and writing files, knowing nothing about serving or architectures.
"""
