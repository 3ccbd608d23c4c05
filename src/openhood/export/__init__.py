"""openhood.export: our op graph → ONNX (``onnx_export``), and its int8 rewrite (``qdq``)."""
