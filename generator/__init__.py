"""neurarch-trace: GPU memory and cost estimates from a Hugging Face config.json alone."""

__version__ = "0.1.0"
DISTRIBUTION = "neurarch-trace-gpu"  # the name pip knows; PyPI's `neurarch-trace` is an unrelated project
