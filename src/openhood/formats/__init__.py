"""openhood.formats: reading and writing model files without running anything they contain."""
