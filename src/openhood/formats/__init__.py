"""File formats: safetensors weights (never pickle), the restricted ``.pth`` reader, ONNX import, GGUF reading.

The lowest layer: reading and writing files without running anything they contain, knowing
nothing about serving or architectures.
"""
