"""The reference-shaped edge: the classes BAGEL's trainer and NeMo AutoModel's recipe use
(`DataConfig`, `BagelDatasetConfig`, the transform and filesystem helpers), built on the
typed core (`PackingConfig`, the families, `PackedDataset.from_groups`)."""
