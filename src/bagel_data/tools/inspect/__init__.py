"""`bagel-data inspect`: packs as pictures (`plots`) and text (`packs`)."""
