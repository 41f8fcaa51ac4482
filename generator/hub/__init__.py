"""Hub I/O: the committed snapshot (read/write), the huggingface_hub client seam, and the crawler."""
