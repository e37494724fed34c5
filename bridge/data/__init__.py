"""Files Bridge ships besides code: the local model's chat template."""
