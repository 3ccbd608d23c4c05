"""openhood.engine.models: the top floor, one module per architecture.

``bert`` (a sentence-embedding folder → op graph), ``mlp`` (feature-vector classifiers → op
graph, the panel GEMM on their layers), ``efficientnet`` (EfficientNet-Lite0 weights → a
channels-last op graph), ``llama`` (a decoder from GGUF with its own packed, batched step
loop), with its ``llama_ops`` (RMSNorm, RoPE, SwiGLU, masked softmax) and ``kv_cache``.

The trade-off: what only one architecture needs stays beside it rather than on a lower floor,
so the floors below grow only with what two or more share.
"""
