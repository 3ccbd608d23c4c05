"""openhood.data: inputs before the engine: image decoding and preprocessing, dataset tables."""
