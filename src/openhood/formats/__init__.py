"""On-disk model formats: readers that turn files into plain NumPy arrays and metadata."""
