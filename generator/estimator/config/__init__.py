"""Reading a config.json under transformers semantics: one reader, the normalised Arch, class defaults, windows, quantisation, custom code and known gaps."""
