"""Low-precision training recipes: FP8 (torchao, delayed scaling) and emulated MX/NVFP4
block-scaled linear layers. Needs torch."""
