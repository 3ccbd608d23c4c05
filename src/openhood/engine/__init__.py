"""openhood.engine: from-scratch forward passes for four model families, in three floors.

The families: BERT-style sentence encoders (embeddings), small MLP classifiers, the
EfficientNet-Lite0 image classifier and a Llama-family decoder (SmolLM2, from GGUF). Imports run
one way down the floors (an import-linter contract in pyproject.toml):

- ``models/``: one module per architecture, with what only it needs (``llama_ops``,
  ``kv_cache``); each turns a weights folder or file into an op graph (BERT, MLP, EfficientNet)
  or runs its own step loop (Llama).
- ``quant/``: post-training int8 and fp16 storage of a graph's ``Linear`` layers, beside the
  models: it rewrites any graph and knows no architecture.
- ``graph/``: the named op graph, its executor, fusion passes, buffer reuse, padding-free
  packing, the convolution ops and the planned MBConv block, the per-op profiler.
- ``kernels/``: the compiled kernels (numba, hand-written LLVM IR), each beside its naive
  reference; the ``Linear`` contract they implement; BLAS glue, threads and cores.

The trade-off: nothing here knows a server, a task or the process it runs in (allocator and
page-release tuning live in ``openhood.process``, wired by the commands); a caller imports the
module it needs by its full path, so this face hands no names on.
"""
