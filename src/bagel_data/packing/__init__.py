"""Packing samples into token-budgeted sequences: layout, masks, position ids, mixing."""
