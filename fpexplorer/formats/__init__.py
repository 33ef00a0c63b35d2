"""The number science: float formats as data, exact decoding and rounding. No Qt, no torch."""
