"""Low-precision training recipes in torch (FP8, MX, NVFP4): quantizers that follow the
exact engine's rules on device, their statistics, and the linear layers that use them."""
