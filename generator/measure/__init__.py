"""Measured peak memory of real training steps and serving runs (optional extra [measure]: torch, transformers, peft)."""
