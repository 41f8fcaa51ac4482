"""Memory from the layer graph: the site's profiles, activations, one exact job, LoRA, splits over cards, the curve and stored bytes."""
