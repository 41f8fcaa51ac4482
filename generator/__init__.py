"""neurarch-trace: GPU memory and cost estimates from a Hugging Face config.json alone."""

__version__ = "0.1.0"
