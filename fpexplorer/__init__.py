"""fpexplorer: explore floating-point formats bit by bit, watch mixed-precision training live."""

__version__ = "0.1.0"
