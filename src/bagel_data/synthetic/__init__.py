"""Generated datasets for the demo, the benchmark and the tests: `dataset` writes the three
families; `images` and `text` make their pixels and words."""
