"""Pixels and frames: image decode and the NaViT resize (`images`), the opt-in JPEG draft
decode (`fast_decode`), video files and frame folders (`video`)."""
