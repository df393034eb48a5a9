"""The dataset families: one module per family, their common base in `base`."""
