"""How a P3109 format's overflow behaves, named as the P3109 draft names it (no Qt).

The engine maps P3109's saturation modes onto its overflow policies (`SATURATION_MODES`:
SatFinite = saturate, SatPropagate = saturate_propagate, OvfInf = ieee). The bit editor shows
the mode a P3109 editor is in under the policy chosen in the Overflow picker.
"""

from __future__ import annotations

from fpexplorer.formats import SATURATION_MODES, FloatFormat, p3109_parameters

# What each mode does, for an extended format (with ±inf) and a finite one.
_MEANING = {
    ("SatFinite", True): "overflow and ±inf → ±max",
    ("SatFinite", False): "overflow → ±max",
    ("SatPropagate", True): "overflow → ±max, ±inf stays ±inf",
    ("SatPropagate", False): "overflow → ±max, ±inf → NaN",
    ("OvfInf", True): "overflow → ±inf",
    ("OvfInf", False): "overflow → NaN",
}
_MODE_OF_POLICY = {policy: mode for mode, policy in SATURATION_MODES.items()}


def p3109_saturation(fmt: FloatFormat, overflow: str | None) -> str | None:
    """ "P3109 SatFinite: overflow and ±inf → ±max" for a P3109 format under an overflow
    policy (None: the format's default); None for a format that is not P3109."""
    parameters = p3109_parameters(fmt)
    if parameters is None:
        return None
    policy = overflow or fmt.default_overflow
    if policy == "nan" and not fmt.has_inf:
        # With no infinity to try first, "nan" sends overflow to NaN exactly as OvfInf does.
        policy = "ieee"
    mode = _MODE_OF_POLICY.get(policy)
    if mode is None:
        return f"P3109: overflow → NaN ({policy}) is none of the draft's saturation modes"
    meaning = _MEANING[(mode, parameters.extended)]
    if not parameters.signed:
        meaning = meaning.replace("±", "+")  # an unsigned format has no -max, no -inf
    return f"P3109 {mode}: {meaning}"
