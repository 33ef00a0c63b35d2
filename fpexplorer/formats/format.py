"""A float format as data, and exact decoding, rounding and stepping with integers and Fractions.

Encodings of the special values (`encoding`):

- ``ieee``: exponent all ones is special: fraction 0 is ±inf, anything else NaN.
- ``fn``: no inf; NaN only where exponent and fraction are all ones (float8_e4m3fn).
- ``fnuz``: no inf, no negative zero; NaN is the negative-zero code (float8_e4m3fnuz).
- ``finite``: no inf, no NaN: every code is a number (float6_e2m3fn, float4_e2m1fn).
- ``fnu``: unsigned, NaN at all ones, no zero and no subnormals: exponent field 0 is an
  ordinary binade (float8_e8m0fnu, whose values are the powers of two 2**-127 .. 2**127).
- ``p3109_extended`` / ``p3109_finite``: the IEEE P3109 family (see `fpexplorer.formats.p3109`):
  one zero (no -0) and one NaN, at the negative-zero code when signed (0x80 in 8 bits) and at
  the all-ones code when unsigned; the extended domain has ±inf at the top magnitude code
  (0x7F/0xFF signed, 0xFE unsigned), the finite domain uses those codes for numbers.

With ``subnormals=False`` (and not ``fnu``) every code with exponent field 0 reads as zero of
its sign, as flush-to-zero hardware reads them; rounding then goes to 0 or ±min_normal.

Rounding modes (`ROUNDING_MODES`): the five IEEE 754 ones, ``round_to_odd`` (truncate, then
make the last significand bit 1 when the result is inexact: the sticky rounding that makes a
later rounding into a narrower format correct), and ``stochastic`` with ``random_bits`` N: the
distance to the lower neighbour, as a fraction of the gap, is rounded to N bits (ties to
even) giving d / 2**N, and N uniform random bits r round up when r + d >= 2**N, so the
probability of rounding up is exactly d / 2**N (gfloat's ``RoundMode.Stochastic``).

Ties and parity at precision 1 (no fraction bits, e.g. e5m0, E8M0): every significand is 1,
so IEEE 754's "even least significant digit" cannot choose; IEEE 754-2019 4.3.1 then takes
the neighbour larger in magnitude (which is why its overflow threshold at p = 1 is
1.5 * 2**emax, inclusive: 1.5 * max overflows). So do MPFR and ml_dtypes (float8_e8m0fnu:
3 -> 4, 1.5 * 2**127 -> NaN), and so does this engine: nearest_even and nearest_away agree
there, and round_to_odd truncates (both neighbours are odd). P3109 formats are the exception:
the P3109 working group's formal specification (Imandra's ieee-p3109, RoundToPrecision:
"codeIsEven" is the exponent's evenness at P = 1) and gfloat break their ties, and pick
round_to_odd's result, by the code, whose last bit at p = 1 is the exponent's (binary8p1se:
1.5 -> 1, 3 -> 4, 6 -> 4, and 1.5 * max -> max, since max's code 0x7E is even); the engine
follows them there. With fraction bits the code's last bit is the significand's and both
readings agree.

Overflow policies (`OVERFLOW_POLICIES`), for a magnitude beyond max:

- ``ieee``: ±inf, else NaN, else ±max (P3109 OvfInf);
- ``saturate``: ±max, infinite inputs included (P3109 SatFinite);
- ``saturate_propagate``: finite overflow to ±max, ±inf stays ±inf (NaN where the format
  has no inf) (P3109 SatPropagate);
- ``nan``: NaN, else ±inf, else ±max.

Under every policy the directions that round toward zero (toward_zero; toward_negative for
positive values; toward_positive for negative ones; round_to_odd, which truncates first)
give ±max for a finite input beyond max, as IEEE 754 §7.4 says: the rounded result of those
directions is max itself, so there is no overflow to represent. That holds under ``nan`` too:
the policy names what an overflow becomes, and those directions do not overflow past max.

Formats without a zero (E8M0, the ``fnu`` encoding) round every positive value below their
smallest value 2**-127 to that smallest value, in every mode: toward_zero of 2**-200 gives
2**-127, larger than the input, with the underflow and inexact flags. That is deliberate:
a rounding must give a value of the format, and on the side toward zero there is none, so
the nearest value there is is the only candidate that keeps the sign and stays finite (NaN
would turn a valid tiny number into "not a number"). It is also what the OCP MX spec does
with a shared scale: the exponent is clamped at -127, never flushed.
"""

from __future__ import annotations

import functools
import math
import operator
import random
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .exact import ExactValue
from .parse import parse_value

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

ROUNDING_MODES = (
    "nearest_even",
    "nearest_away",
    "toward_zero",
    "toward_positive",
    "toward_negative",
    "round_to_odd",
    "stochastic",
)
OVERFLOW_POLICIES = ("ieee", "saturate", "saturate_propagate", "nan")
P3109_ENCODINGS = ("p3109_extended", "p3109_finite")
ENCODINGS = ("ieee", "fn", "fnuz", "finite", "fnu", *P3109_ENCODINGS)
# Stochastic rounding's default number of random bits: the whole of one 64-bit draw.
DEFAULT_RANDOM_BITS = 64
MAX_RANDOM_BITS = 64
CLASSES = ("zero", "subnormal", "normal", "inf", "nan")

MAX_WIDTH = 64
MAX_EXPONENT_BITS = 16  # 2**32767 is still a comfortable Python int; more would not be

ValueLike = Any  # int | float | Fraction | Decimal | str | ExactValue (checked at run time)


@dataclass(frozen=True, slots=True)
class Fields:
    """The bit fields of a code and what they mean."""

    sign: int
    biased_exponent: int
    unbiased_exponent: int  # for subnormals and zeros the effective exponent 1 - bias
    fraction: int
    significand: Fraction  # 1.f for normals, 0.f for subnormals (and zeros)
    is_subnormal: bool


@dataclass(frozen=True, slots=True)
class Rounded:
    """The result of rounding a value into a format, with its error and IEEE-style flags."""

    format: FloatFormat
    code: int
    input: ExactValue
    value: ExactValue
    rounding: str
    overflow_policy: str
    error_abs: Fraction | None  # |value - input|; None when either is not finite
    error_rel: Fraction | None  # error_abs / |input|; None for input 0 or non-finite
    error_ulps: Fraction | None  # error_abs / ulp at the result
    overflow: bool
    underflow: bool
    inexact: bool
    invalid: bool = False  # the input has no encoding at all (NaN or inf into FP4, -1 into E8M0)


@dataclass(frozen=True, slots=True)
class _Derived:
    """Constants of a format, computed once per format (see `_derived`)."""

    width: int
    sign_shift: int  # position of the sign bit (== width - 1 when signed)
    exponent_mask: int
    fraction_mask: int
    exponent_all_ones: int
    first_exponent_field: int  # 1, or 0 for fnu where field 0 is a normal binade
    emin: int  # exponent of min_normal
    max_exponent: int  # exponent of max: floor(log2(max))
    max_magnitude_code: int  # largest code (sign bit clear) that is finite
    max_value: Fraction
    min_normal: Fraction
    min_subnormal: Fraction | None
    smallest_positive_code: int
    has_inf: bool
    has_nan: bool
    has_negative_zero: bool
    has_zero: bool
    default_overflow: str
    nan_code: int  # canonical (quiet, positive) NaN, -1 if none
    nan_is_signed: bool  # a NaN of either sign exists (ieee, fn); fnuz and P3109 have one NaN
    infinity_magnitude_code: int  # the code of +inf, -1 if none
    parity_of_code: bool  # ties and round_to_odd read the code's last bit (see _round_magnitude)


@dataclass(frozen=True, slots=True)
class _Outcome:
    code: int
    overflow: bool
    underflow: bool
    inexact: bool
    invalid: bool


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """A binary floating-point format described by its parameters (formats are data)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    encoding: str = "ieee"
    subnormals: bool = True
    signed: bool = True

    def __post_init__(self) -> None:
        _validate(self)

    # ---- shape -------------------------------------------------------------------------
    @property
    def width(self) -> int:
        """Bits in a code: sign (if any) + exponent + fraction."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def spec(self) -> str:
        """A spec string that `get_format` turns back into these parameters."""
        from .p3109 import p3109_name
        from .registry import parameters_named

        p3109 = p3109_name(self)
        if p3109 is not None:
            return p3109
        text = f"e{self.exponent_bits}m{self.mantissa_bits}"
        named = parameters_named(text)
        if named is not None and named != self._parameters():
            # A bare "e4m3" names float8_e4m3fn; say "ieee" so the spec means this format.
            text += ":encoding=ieee" if self.encoding == "ieee" else ""
        if self.bias != default_bias(self.exponent_bits, self.encoding):
            text += f":bias={self.bias}"
        if self.encoding != "ieee":
            text += f":encoding={self.encoding}"
        if self.subnormals != _default_subnormals(self.encoding, self.mantissa_bits):
            text += ":subnormals=" + ("on" if self.subnormals else "off")
        if not self.signed and self.encoding != "fnu":
            text += ":unsigned"
        return text

    def _parameters(self) -> tuple[int, int, int, str, bool, bool]:
        return (
            self.exponent_bits,
            self.mantissa_bits,
            self.bias,
            self.encoding,
            self.subnormals,
            self.signed,
        )

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other names `get_format` takes for this format ("fp16", "half" for float16)."""
        from .registry import aliases_of

        return aliases_of(self.name)

    @property
    def description(self) -> str:
        """The format in words: what it is, its bits, bias and inf/NaN encoding."""
        from .registry import note_of

        parts = []
        if self.signed:
            parts.append("1 sign")
        parts.append(f"{self.exponent_bits} exponent")
        parts.append(f"{self.mantissa_bits} fraction bits")
        special = {
            "ieee": "IEEE inf/NaN",
            "fn": "no inf, NaN at all ones",
            "fnuz": "no inf, no -0, NaN at -0",
            "finite": "no inf, no NaN",
            "fnu": "unsigned, no zero, NaN at all ones",
            "p3109_extended": "P3109 extended: "
            + ("±inf at the top codes" if self.signed else "inf at the top code but one")
            + ", one NaN, no -0",
            "p3109_finite": "P3109 finite: no inf, one NaN, no -0",
        }[self.encoding]
        text = f"{self.width} bits: {', '.join(parts)}, bias {self.bias}, {special}"
        if not self.subnormals and self.encoding != "fnu" and self.mantissa_bits:
            text += ", no subnormals"
        if not self.signed and self.encoding not in ("fnu", *P3109_ENCODINGS):
            text += ", unsigned"
        note = note_of(self.name)
        return f"{note}; {text}" if note else text

    # ---- exact properties ------------------------------------------------------------
    @property
    def max(self) -> Fraction:
        """The largest finite value, exactly."""
        return _derived(self).max_value

    @property
    def min_normal(self) -> Fraction:
        """The smallest positive normal value, exactly."""
        return _derived(self).min_normal

    @property
    def min_subnormal(self) -> Fraction | None:
        """The smallest positive subnormal value, exactly; None without subnormals."""
        return _derived(self).min_subnormal

    @property
    def eps(self) -> Fraction:
        """The gap between 1 and the next larger value of the (unbounded) significand grid."""
        return Fraction(1, 2**self.mantissa_bits)

    @property
    def decimal_digits(self) -> float:
        """Precision in decimal digits, (mantissa_bits + 1) * log10(2) (a rounded float)."""
        return (self.mantissa_bits + 1) * math.log10(2)

    @property
    def finite_count(self) -> int:
        """Number of codes that are finite numbers (+0 and -0 both count)."""
        d = _derived(self)
        positive = d.max_magnitude_code + 1
        if not self.signed:
            return positive
        # Without -0 (fnuz, P3109) the negative-zero code is NaN, not a number.
        negative = positive if d.has_negative_zero else positive - 1
        return positive + negative

    @property
    def has_inf(self) -> bool:
        """Whether the format encodes +-inf."""
        return _derived(self).has_inf

    @property
    def has_nan(self) -> bool:
        """Whether the format encodes NaN (FP6/FP4 do not)."""
        return _derived(self).has_nan

    @property
    def has_zero(self) -> bool:
        """Whether the format encodes zero (E8M0 and other fnu formats do not: tiny values
        round up to their smallest value)."""
        return _derived(self).has_zero

    @property
    def has_negative_zero(self) -> bool:
        """Whether -0 is a code of its own (not in fnuz, unsigned or P3109 formats)."""
        return _derived(self).has_negative_zero

    @property
    def default_overflow(self) -> str:
        """The overflow policy of `overflow=None`: what ml_dtypes does for this format."""
        return _derived(self).default_overflow

    @property
    def code_count(self) -> int:
        """Number of codes, 2**width (NaN and inf codes included)."""
        return 1 << self.width

    # ---- decoding --------------------------------------------------------------------
    def _check_code(self, code: int) -> int:
        # A Python int out: a numpy uint8 code (an element of from_float_array's result) would
        # overflow in the exponent arithmetic and decode wrong. operator.index takes integers
        # only, so 1.5 (or 1.0) is refused instead of truncated; a bool is no code.
        if isinstance(code, bool):
            raise ValueError(f"a code must be an int, not {type(code).__name__}")
        try:
            code = operator.index(code)
        except TypeError:
            raise ValueError(f"a code must be an int, not {type(code).__name__}") from None
        if not 0 <= code < (1 << self.width):
            raise ValueError(f"code {code:#x} out of range for the {self.width}-bit {self.name}")
        return code

    def _split(self, code: int) -> tuple[int, int, int]:
        d = _derived(self)
        sign = (code >> d.sign_shift) & 1 if self.signed else 0
        exponent = (code >> self.mantissa_bits) & d.exponent_mask
        fraction = code & d.fraction_mask
        return sign, exponent, fraction

    def classify(self, code: int) -> str:
        """ "zero" | "subnormal" | "normal" | "inf" | "nan"."""
        code = self._check_code(code)
        d = _derived(self)
        sign, exponent, fraction = self._split(code)
        magnitude = code & ((1 << d.sign_shift) - 1) if self.signed else code
        if self.encoding == "ieee" and exponent == d.exponent_all_ones:
            return "inf" if fraction == 0 else "nan"
        if self.encoding == "fnuz" and sign == 1 and magnitude == 0:
            return "nan"
        if self.encoding in P3109_ENCODINGS:
            if code == d.nan_code:
                return "nan"
            if magnitude == d.infinity_magnitude_code:
                return "inf"
        if self.encoding in ("fn", "fnu") and magnitude == (1 << d.sign_shift) - 1:
            return "nan"
        if self.encoding == "fnu":
            return "normal"
        if exponent == 0:
            if fraction == 0 or not self.subnormals:
                return "zero"
            return "subnormal"
        return "normal"

    def fields(self, code: int) -> Fields:
        """The code's sign, biased and unbiased exponent, fraction and significand."""
        code = self._check_code(code)
        d = _derived(self)
        sign, exponent, fraction = self._split(code)
        leading = 0 if exponent < d.first_exponent_field else 1
        effective = max(exponent, d.first_exponent_field) - self.bias
        is_subnormal = self.classify(code) == "subnormal"
        significand = leading + Fraction(fraction, 1 << self.mantissa_bits)
        return Fields(sign, exponent, effective, fraction, significand, is_subnormal)

    def to_exact(self, code: int) -> ExactValue:
        """The exact value of a code; never raises for a valid code."""
        code = self._check_code(code)
        kind = self.classify(code)
        sign, exponent, fraction = self._split(code)
        negative = bool(sign)
        if kind == "nan":
            # FNUZ and P3109 formats have one NaN whose code happens to set the sign bit
            # (0x80): it has no sign, so it reads "nan" (as ml_dtypes prints it), not "-nan".
            return ExactValue.nan(negative and _derived(self).nan_is_signed)
        if kind == "inf":
            return ExactValue.infinity(negative)
        if kind == "zero":
            return ExactValue("finite", negative, Fraction(0))
        d = _derived(self)
        if exponent < d.first_exponent_field:  # subnormal
            integer, power = fraction, d.emin - self.mantissa_bits
        else:
            integer = fraction | (1 << self.mantissa_bits)
            power = exponent - self.bias - self.mantissa_bits
        magnitude = Fraction(integer << power) if power >= 0 else Fraction(integer, 1 << -power)
        return ExactValue("finite", negative, magnitude)

    def to_fraction(self, code: int) -> Fraction:
        """The exact value of a finite code; ValueError for inf and NaN."""
        value = self.to_exact(code)
        if not value.is_finite:
            raise ValueError(f"code {code:#x} of {self.name} is {value}, not a finite number")
        return value.fraction

    def to_float(self, code: int) -> float:
        """The value as a Python float: exact wherever float64 holds it, else rounded."""
        return self.to_exact(code).to_float()

    def code_to_bits(self, code: int) -> str:
        """The code in binary split as sign|exponent|fraction, e.g. "0|01111|0000000000"."""
        code = self._check_code(code)
        sign, exponent, fraction = self._split(code)
        parts = []
        if self.signed:
            parts.append(str(sign))
        parts.append(format(exponent, f"0{self.exponent_bits}b"))
        if self.mantissa_bits:
            parts.append(format(fraction, f"0{self.mantissa_bits}b"))
        return "|".join(parts)

    def code_to_hex(self, code: int) -> str:
        """The code in hex, zero-padded to the width ("0x3c00")."""
        code = self._check_code(code)
        return f"0x{code:0{(self.width + 3) // 4}x}"

    # ---- neighbours ------------------------------------------------------------------
    def _magnitude_code(self, code: int) -> tuple[bool, int]:
        d = _derived(self)
        if not self.signed:
            return False, code
        return bool(code >> d.sign_shift), code & ((1 << d.sign_shift) - 1)

    def _signed_code(self, negative: bool, magnitude_code: int) -> int:
        d = _derived(self)
        if negative and not (magnitude_code == 0 and not d.has_negative_zero):
            return magnitude_code | (1 << d.sign_shift)
        return magnitude_code

    def _canonical_positive(self, magnitude_code: int) -> int:
        """Skip codes that read as zero (flushed subnormals) when stepping away from 0."""
        if not self.subnormals and self.encoding != "fnu" and 0 < magnitude_code:
            return max(magnitude_code, 1 << self.mantissa_bits)
        return magnitude_code

    def next_up(self, code: int) -> int:
        """The code of the smallest value above this one (IEEE nextUp).

        -0 and +0 step to the smallest positive value; -min_subnormal steps to -0. Where no
        larger value exists (+inf, or max in a format without inf) the code is returned as is;
        NaN stays NaN.
        """
        return self._step(code, up=True)

    def next_down(self, code: int) -> int:
        """The code of the largest value below this one (IEEE nextDown); see `next_up`."""
        return self._step(code, up=False)

    def _step(self, code: int, *, up: bool) -> int:
        code = self._check_code(code)
        d = _derived(self)
        kind = self.classify(code)
        if kind == "nan":
            return code
        negative, magnitude = self._magnitude_code(code)
        if kind == "zero":
            magnitude = 0
        if kind == "inf":
            if negative == up:  # -inf going up, +inf going down: to ∓max
                return self._signed_code(negative, d.max_magnitude_code)
            return code
        away = up != negative or kind == "zero"  # moving away from zero
        if kind == "zero":
            negative = not up
            if negative and not self.signed:
                return code
        if away:
            if magnitude >= d.max_magnitude_code:
                if d.has_inf:
                    return self._signed_code(negative, d.infinity_magnitude_code)
                return code
            if kind == "zero":
                target = d.smallest_positive_code
            else:
                target = self._canonical_positive(magnitude + 1)
            return self._signed_code(negative, target)
        # toward zero
        if magnitude == d.smallest_positive_code:
            if not d.has_zero:
                return code
            if negative and not d.has_negative_zero:
                return 0
            return self._signed_code(negative, 0)
        return self._signed_code(negative, magnitude - 1)

    def gap_up(self, code: int) -> Fraction | None:
        """Distance to the next larger value; None when either is not finite or none exists."""
        return self._gap(code, self.next_up(code))

    def gap_down(self, code: int) -> Fraction | None:
        """Distance to the next smaller value; None when either is not finite or none exists."""
        return self._gap(code, self.next_down(code))

    def _gap(self, code: int, other: int) -> Fraction | None:
        here, there = self.to_exact(code), self.to_exact(other)
        if not (here.is_finite and there.is_finite) or other == code:
            return None
        return abs(here.fraction - there.fraction)

    def ulp(self, code: int) -> Fraction | None:
        """The quantum of the binade of this value: 2**(max(e, emin) - mantissa_bits).

        For zero it is the smallest subnormal (min_normal when there are none); None for
        inf and NaN.
        """
        value = self.to_exact(code)
        if not value.is_finite:
            return None
        d = _derived(self)
        if value.magnitude == 0 and not self.subnormals:
            return d.min_normal
        exponent = max(_floor_log2(value.magnitude), d.emin) if value.magnitude else d.emin
        return _power_of_two(exponent - self.mantissa_bits)

    # ---- rounding --------------------------------------------------------------------
    def from_value(
        self,
        x: ValueLike,
        rounding: str = "nearest_even",
        overflow: str | None = None,
        seed: int | None = None,
        *,
        random_bits: int | None = None,
        random_draw: int | None = None,
    ) -> int:
        """The code of `x` rounded into this format.

        `x`: int, float, Fraction, Decimal, str (see `parse_value`) or ExactValue. `overflow`
        None means this format's `default_overflow`, which is what ml_dtypes does, so default
        conversions agree with ml_dtypes bit for bit (see the README for the exceptions).
        Stochastic rounding uses `random_bits` random bits (default 64): drawn from `seed`,
        or given as `random_draw` (an int in [0, 2**random_bits)) to replay one draw.
        """
        exact = to_exact_value(x, self)
        return self._round(exact, rounding, overflow, seed, random_bits, random_draw).code

    def round(
        self,
        x: ValueLike,
        rounding: str = "nearest_even",
        overflow: str | None = None,
        seed: int | None = None,
        *,
        random_bits: int | None = None,
        random_draw: int | None = None,
    ) -> Rounded:
        """Round `x` into this format: the code, its value, the errors and the flags.

        The arguments are those of `from_value`.
        """
        exact = to_exact_value(x, self)
        outcome = self._round(exact, rounding, overflow, seed, random_bits, random_draw)
        value = self.to_exact(outcome.code)
        error_abs = error_rel = error_ulps = None
        if exact.is_finite and value.is_finite:
            error_abs = abs(value.fraction - exact.fraction)
            if exact.magnitude:
                error_rel = error_abs / exact.magnitude
            ulp = self.ulp(outcome.code)
            if ulp:
                error_ulps = _times_power_of_two(error_abs, -_floor_log2(ulp))
        return Rounded(
            format=self,
            code=outcome.code,
            input=exact,
            value=value,
            rounding=rounding,
            overflow_policy=overflow or self.default_overflow,
            error_abs=error_abs,
            error_rel=error_rel,
            error_ulps=error_ulps,
            overflow=outcome.overflow,
            underflow=outcome.underflow,
            inexact=outcome.inexact,
            invalid=outcome.invalid,
        )

    def _round(
        self,
        x: ExactValue,
        rounding: str,
        overflow: str | None,
        seed: int | None,
        random_bits: int | None = None,
        random_draw: int | None = None,
    ) -> _Outcome:
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"unknown rounding mode {rounding!r}; one of {ROUNDING_MODES}")
        policy = overflow or _derived(self).default_overflow
        if policy not in OVERFLOW_POLICIES:
            raise ValueError(f"unknown overflow policy {overflow!r}; one of {OVERFLOW_POLICIES}")
        bits = check_random_bits(rounding, random_bits)
        if random_draw is not None:
            if isinstance(random_draw, bool) or not isinstance(random_draw, int):
                raise ValueError("random_draw must be an int")
            if rounding != "stochastic" or not 0 <= random_draw < 1 << bits:
                raise ValueError(f"random_draw must be in [0, 2**{bits}) with stochastic rounding")
        draw = _Draw(bits, check_seed(seed), random_draw)
        d = _derived(self)
        if x.is_nan:
            if d.has_nan:
                return _Outcome(self._nan_with_sign(x.negative), False, False, False, False)
            # No NaN to give: like ml_dtypes, a zero whose sign bit is the NaN's inverted.
            return _Outcome(self._signed_code(not x.negative, 0), False, False, False, True)
        if x.negative and not self.signed and not x.is_zero:
            return self._invalid(x)
        if x.is_inf:
            code = self._too_large(x.negative, policy, from_infinity=True)
            if not d.has_inf:
                # No code for ±inf (as NaN into FP4): what the policy gives (NaN, or ±max)
                # stands in for it, and the flags say so rather than "exact".
                return _Outcome(code, False, False, False, True)
            # Kept infinite: exact. Saturated to ±max by the policy: an overflow, inexact.
            saturated = code != self._signed_code(x.negative, d.infinity_magnitude_code)
            return _Outcome(code, saturated, False, saturated, False)
        if x.magnitude == 0:
            if not d.has_zero:
                return self._invalid(x)
            return _Outcome(self._signed_code(x.negative, 0), False, False, False, False)
        magnitude_code, exact, overflowed, tiny = self._round_magnitude(
            x.magnitude, x.negative, rounding, draw
        )
        if overflowed:
            if _rounds_toward_max(rounding, x.negative):
                code = self._signed_code(x.negative, d.max_magnitude_code)
            else:
                code = self._too_large(x.negative, policy, from_infinity=False)
            return _Outcome(code, True, False, True, False)
        code = self._signed_code(x.negative, magnitude_code)
        return _Outcome(code, False, tiny and not exact, not exact, False)

    def _invalid(self, x: ExactValue) -> _Outcome:
        d = _derived(self)
        code = d.nan_code if d.has_nan else 0
        return _Outcome(code, False, False, False, True)

    def _nan_with_sign(self, negative: bool) -> int:
        d = _derived(self)
        if negative and d.nan_is_signed:
            return d.nan_code | (1 << d.sign_shift)
        return d.nan_code

    def _too_large(self, negative: bool, policy: str, *, from_infinity: bool) -> int:
        """The code for a magnitude beyond max, under an overflow policy."""
        d = _derived(self)
        infinity = self._signed_code(negative, d.infinity_magnitude_code)
        kind = _too_large_kind(d, policy, from_infinity)
        if kind == "inf":
            return infinity
        if kind == "nan":
            return self._nan_with_sign(negative)
        return self._signed_code(negative, d.max_magnitude_code)

    def _round_magnitude(
        self, magnitude: Fraction, negative: bool, rounding: str, draw: _Draw
    ) -> tuple[int, bool, bool, bool]:
        """Round a positive magnitude: (magnitude code, exact, overflowed, tiny).

        Integer arithmetic only: a typed value such as 1e99999 is a Fraction of 330,000-bit
        integers, and Fraction division (a gcd per step) took a quarter of a second per
        rounding; a shift and one divmod take microseconds.
        """
        d = _derived(self)
        m = self.mantissa_bits
        numerator, denominator = magnitude.numerator, magnitude.denominator
        exponent = _floor_log2(magnitude)
        if exponent > d.max_exponent:
            # At or above 2**(max exponent + 1): beyond max in every rounding mode, before
            # the exponent range is applied, so an overflow (IEEE 754 7.4).
            return d.max_magnitude_code + 1, False, True, False
        tiny = exponent < d.emin
        if tiny and not self.subnormals:
            if not d.has_zero:
                # Nothing below min_normal (E8M0): the smallest value is the nearest there is,
                # in every mode (see the module docstring for why toward_zero goes up here).
                return d.smallest_positive_code, False, False, True
            low_code, high_code = 0, 1 << m
            # where it lies between 0 and min_normal: numerator / (denominator * min_normal)
            rest, scale = _scaled(numerator, denominator, d.emin)
            up = _round_up(
                rest, scale, rounding, negative, low_odd=False, high_odd=not m, draw=draw
            )
            return (high_code if up else low_code), False, False, True
        quantum_exponent = max(exponent, d.emin) - m
        scaled_numerator, scale = _scaled(numerator, denominator, quantum_exponent)
        integer, rest = divmod(scaled_numerator, scale)
        # integer is in [2**m, 2**(m+1)) for normals and [0, 2**m) below min_normal; the code
        # follows directly: (biased exponent - 1) << m + integer, and the next code is +1.
        low_code = ((quantum_exponent + m + self.bias - 1) << m) + integer
        if d.first_exponent_field == 0:  # fnu: exponent field 0 is a normal binade
            low_code = ((quantum_exponent + m + self.bias) << m) + integer - (1 << m)
        if rest == 0:
            result = low_code
        else:
            # "Even" and "odd" are those of the significand as an integer at the lower
            # neighbour's quantum, as IEEE 754 and MPFR read them: with fraction bits that is
            # the code's last bit. With none (p = 1) the lower neighbour's significand is 1 and
            # the upper one's, at the same quantum, 10 (binary): a tie goes to the larger
            # magnitude (IEEE 754-2019 4.3.1: of two odd neighbours, the larger; hence its
            # overflow threshold 1.5 * 2**emax at p = 1, MPFR and ml_dtypes' E8M0 agree), and
            # round_to_odd truncates. P3109 formats read the code's last bit instead, the
            # exponent's at p = 1, as P3109's formal specification and gfloat do: 6 -> 4
            # there, and 1.5 * max of binary8p1se -> max, whose code 0x7E is even.
            parity = low_code if d.parity_of_code else integer
            up = _round_up(
                rest,
                scale,
                rounding,
                negative,
                low_odd=bool(parity & 1),
                high_odd=not parity & 1,
                draw=draw,
            )
            result = low_code + up
        if result > d.max_magnitude_code:
            return result, False, True, tiny
        return result, rest == 0, False, tiny

    # ---- decimal strings ---------------------------------------------------------------
    def shortest_decimal(self, code: int) -> str:
        """The shortest decimal that rounds back to this code (nearest_even), repr style."""
        from .decimal import shortest_decimal

        return shortest_decimal(self, code)

    # ---- arrays ----------------------------------------------------------------------
    def to_float_array(self, codes: npt.ArrayLike) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Decode an array of codes to float64 (exactly, for every named format)."""
        from .vectorized import to_float_array

        return to_float_array(self, codes)

    def from_float_array(
        self,
        x: npt.ArrayLike,
        rounding: str = "nearest_even",
        overflow: str | None = None,
        seed: int | None = None,
        *,
        random_bits: int | None = None,
        random_draws: npt.ArrayLike | None = None,
    ) -> np.ndarray[Any, Any]:
        """Round an array of floats into codes (uint8/16/32/64 by width), like `from_value`.

        Stochastic rounding draws `random_bits` bits per element from a numpy generator seeded
        with `seed`, or takes them from `random_draws` (integers of the input's shape).
        """
        from .vectorized import from_float_array

        return from_float_array(self, x, rounding, overflow, seed, random_bits, random_draws)

    def classify_array(self, codes: npt.ArrayLike) -> np.ndarray[Any, np.dtype[np.int8]]:
        """Classes of an array of codes as indices into CLASSES."""
        from .vectorized import classify_array

        return classify_array(self, codes)

    def __str__(self) -> str:
        return self.name


def _scaled(numerator: int, denominator: int, exponent: int) -> tuple[int, int]:
    """numerator / denominator / 2**exponent as an integer numerator over an integer scale."""
    if exponent >= 0:
        return numerator, denominator << exponent
    return numerator << -exponent, denominator


@dataclass(frozen=True, slots=True)
class _Draw:
    """Where stochastic rounding's random bits come from: a given draw, or a seeded one."""

    bits: int
    seed: int | None
    given: int | None

    def take(self) -> int:
        if self.given is not None:
            return self.given
        return random.Random(self.seed).getrandbits(self.bits)


def check_seed(seed: int | None) -> int | None:
    """A seed as a Python int (a numpy integer too), or None; ValueError for anything else.

    One rule for the scalar path (random.Random, which would also take "a" or 1.5) and the
    array path (numpy's generator, which takes neither, nor a negative seed).
    """
    if seed is None:
        return None
    try:
        value = operator.index(seed) if not isinstance(seed, bool) else -1
    except TypeError:
        value = -1
    if value < 0:
        raise ValueError(f"seed must be a whole number >= 0, not {seed!r}")
    return value


def check_random_bits(rounding: str, random_bits: int | None) -> int:
    """The number of random bits stochastic rounding uses; ValueError when it makes no sense."""
    if random_bits is None:
        return DEFAULT_RANDOM_BITS
    if isinstance(random_bits, bool) or not isinstance(random_bits, int):
        raise ValueError("random_bits must be an int")
    if rounding != "stochastic":
        raise ValueError("random_bits goes with rounding='stochastic' only")
    if not 1 <= random_bits <= MAX_RANDOM_BITS:
        raise ValueError(f"random_bits must be 1..{MAX_RANDOM_BITS}, not {random_bits}")
    return random_bits


def stochastic_threshold(rest: int, scale: int, random_bits: int) -> int:
    """d: the fraction rest / scale rounded to `random_bits` bits, ties to even, times 2**N.

    Stochastic rounding goes up when r + d >= 2**N for N uniform random bits r, so exactly
    d of the 2**N draws go up (gfloat's ``RoundMode.Stochastic`` computes the same d).
    """
    quotient, remainder = divmod(rest << random_bits, scale)
    if 2 * remainder > scale or (2 * remainder == scale and quotient & 1):
        quotient += 1
    return quotient


def _round_up(
    rest: int,
    scale: int,
    rounding: str,
    negative: bool,
    *,
    low_odd: bool,
    high_odd: bool,
    draw: _Draw,
) -> int:
    """1 when a magnitude strictly between two neighbours goes to the larger one.

    It lies `rest / scale` of the way from the smaller neighbour to the larger (0 < rest <
    scale); comparisons with one half are made on integers.
    """
    if rounding == "nearest_even":
        if 2 * rest != scale:
            return int(2 * rest > scale)
        # A tie goes to the even one (significand or code: see _round_magnitude); if both are
        # even (0 and min_normal without subnormals) it goes to zero.
        return int(low_odd and not high_odd)
    if rounding == "nearest_away":
        return int(2 * rest >= scale)
    if rounding == "toward_zero":
        return 0
    if rounding == "toward_positive":
        return int(not negative)
    if rounding == "toward_negative":
        return int(negative)
    if rounding == "round_to_odd":
        # The odd one of two neighbours (significand or code, as for ties). Where neither is
        # odd (0 and min_normal without subnormals) the nonzero one: an inexact result must
        # never look exact.
        return int(not low_odd)
    threshold = stochastic_threshold(rest, scale, draw.bits)
    return int(draw.take() + threshold >= 1 << draw.bits)


def _too_large_kind(d: _Derived, policy: str, from_infinity: bool) -> str:
    """What stands for a magnitude beyond max: "inf", "nan" or "max".

    saturate: max. ieee: inf, else NaN, else max. saturate_propagate: max for a finite
    input, and an infinite one as under ieee. nan: NaN, else inf, else max. An infinite input
    stays infinite where the format has inf (unless saturating): it is exact.
    """
    if policy == "saturate" or (policy == "saturate_propagate" and not from_infinity):
        return "max"
    if from_infinity and d.has_inf:
        return "inf"
    preference = ("nan", "inf") if policy == "nan" else ("inf", "nan")
    for kind in preference:
        if (kind == "inf" and d.has_inf) or (kind == "nan" and d.has_nan):
            return kind
    return "max"


def _rounds_toward_max(rounding: str, negative: bool) -> bool:
    """IEEE 754: directed roundings toward zero overflow to ±max, not to infinity.

    round_to_odd truncates first, so it is one of them.
    """
    if rounding in ("toward_zero", "round_to_odd"):
        return True
    if rounding == "toward_positive":
        return negative
    if rounding == "toward_negative":
        return not negative
    return False


def _floor_log2(value: Fraction) -> int:
    """floor(log2(value)) for a positive Fraction, exactly."""
    numerator, denominator = value.numerator, value.denominator
    guess = numerator.bit_length() - denominator.bit_length()
    # value >= 2**guess ?
    if guess >= 0:
        if numerator < denominator << guess:
            guess -= 1
    elif numerator << -guess < denominator:
        guess -= 1
    return guess


def _power_of_two(exponent: int) -> Fraction:
    return Fraction(1 << exponent) if exponent >= 0 else Fraction(1, 1 << -exponent)


def _times_power_of_two(value: Fraction, exponent: int) -> Fraction:
    """value * 2**exponent, exactly, the powers of two cancelled by shifts.

    Fraction's own division takes the gcd of the two denominators: for 1e-99999 divided by
    an ulp of e16m47 (2**-32812), a gcd of numbers of 330,000 and 32,000 bits, 15 ms; here
    the result's parts are coprime from the start, and Fraction's check of that is cheap
    when one of them is small, as an error in ulps is.
    """
    numerator, denominator = value.numerator, value.denominator
    if exponent >= 0:
        cancel = min(exponent, (denominator & -denominator).bit_length() - 1)
        return Fraction(numerator << (exponent - cancel), denominator >> cancel)
    cancel = min(-exponent, (numerator & -numerator).bit_length() - 1) if numerator else 0
    return Fraction(numerator >> cancel, denominator << (-exponent - cancel))


def default_bias(exponent_bits: int, encoding: str) -> int:
    """2**(e-1) - 1, or 2**(e-1) for fnuz (one more binade of small values, as ml_dtypes)
    and for P3109 (signed: 2**(K-P-1); unsigned: 2**(K-P), which is 2**(e-1) in both)."""
    if encoding == "fnuz" or encoding in P3109_ENCODINGS:
        return 1 << (exponent_bits - 1)
    return (1 << (exponent_bits - 1)) - 1


def _validate(fmt: FloatFormat) -> None:
    if fmt.encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {fmt.encoding!r}; one of {ENCODINGS}")
    for field_name in ("exponent_bits", "mantissa_bits", "bias"):
        value = getattr(fmt, field_name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{field_name} must be an int")
    for field_name in ("subnormals", "signed"):
        # A string such as "no" or "off" would read as True: a format unlike the one asked for.
        if not isinstance(getattr(fmt, field_name), bool):
            raise ValueError(f"{field_name} must be True or False")
    if not 1 <= fmt.exponent_bits <= MAX_EXPONENT_BITS:
        raise ValueError(f"exponent bits must be 1..{MAX_EXPONENT_BITS}, not {fmt.exponent_bits}")
    if fmt.mantissa_bits < 0:
        raise ValueError("mantissa bits must not be negative")
    if fmt.width > MAX_WIDTH:
        raise ValueError(f"a format is at most {MAX_WIDTH} bits wide, this one {fmt.width}")
    if fmt.exponent_bits + fmt.mantissa_bits > MAX_WIDTH - 1:
        # Codes and their successors must fit numpy's uint64 in the array paths.
        raise ValueError(f"an unsigned format is at most {MAX_WIDTH - 1} bits wide")
    if fmt.encoding == "ieee" and fmt.exponent_bits < 2:
        raise ValueError("an ieee encoding needs at least 2 exponent bits (all ones is special)")
    if fmt.encoding == "fnu" and (fmt.signed or fmt.subnormals):
        raise ValueError("the fnu encoding is unsigned and has no subnormals")
    if fmt.encoding == "fnuz" and not fmt.signed:
        raise ValueError("the fnuz encoding needs a sign bit (NaN is the negative-zero code)")
    if fmt.encoding in P3109_ENCODINGS and fmt.exponent_bits + fmt.mantissa_bits < 2:
        raise ValueError("a P3109 format needs at least 2 bits besides the sign")
    if fmt.encoding == "fn" and fmt.exponent_bits + fmt.mantissa_bits < 2:
        # e1m0 with NaN at all ones: the one other magnitude code is zero, no number left.
        raise ValueError("too narrow for NaN at all ones: no nonzero value would remain")
    if abs(fmt.bias) > (1 << MAX_EXPONENT_BITS):
        limit = 1 << MAX_EXPONENT_BITS
        raise ValueError(f"bias {fmt.bias} is out of range (-{limit}..{limit})")
    if not isinstance(fmt.name, str) or not fmt.name:
        raise ValueError("a format needs a name")


@functools.cache
def _derived(fmt: FloatFormat) -> _Derived:
    e_bits, m = fmt.exponent_bits, fmt.mantissa_bits
    width = fmt.width
    magnitude_bits = e_bits + m
    all_magnitude = (1 << magnitude_bits) - 1
    exponent_all_ones = (1 << e_bits) - 1
    first_field = 0 if fmt.encoding == "fnu" else 1
    emin = first_field - fmt.bias
    p3109 = fmt.encoding in P3109_ENCODINGS
    extended = fmt.encoding == "p3109_extended"
    if fmt.encoding == "ieee":
        max_code = (exponent_all_ones << m) - 1
    elif fmt.encoding in ("fn", "fnu"):
        max_code = all_magnitude - 1
    elif p3109:
        # Below the top: inf (extended), and NaN when unsigned (signed, it is the -0 code).
        max_code = all_magnitude - int(extended) - int(not fmt.signed)
    else:  # fnuz, finite
        max_code = all_magnitude
    has_inf = fmt.encoding == "ieee" or extended
    has_nan = fmt.encoding in ("fn", "fnuz", "fnu") or p3109 or (fmt.encoding == "ieee" and m > 0)
    has_zero = fmt.encoding != "fnu"
    has_negative_zero = fmt.signed and fmt.encoding not in ("fnuz", "fnu") and not p3109
    if fmt.encoding == "ieee":
        infinity_magnitude_code = exponent_all_ones << m
    else:
        infinity_magnitude_code = max_code + 1 if extended else -1
    if fmt.encoding == "ieee":
        nan_code = (exponent_all_ones << m) | (1 << (m - 1)) if m > 0 else -1
    elif fmt.encoding == "fnuz" or (p3109 and fmt.signed):
        nan_code = 1 << magnitude_bits
    elif has_nan:
        nan_code = all_magnitude
    else:
        nan_code = -1
    if fmt.encoding == "fnu":
        smallest_positive = 0
    elif fmt.subnormals and m > 0:
        smallest_positive = 1
    else:
        smallest_positive = 1 << m
    if has_nan:
        default_overflow = "ieee" if has_inf else "nan"
    else:
        default_overflow = "ieee" if has_inf else "saturate"
    # Values straight from the fields, without going through FloatFormat.to_exact (which
    # needs this very object).
    top_field, top_fraction = max_code >> m, max_code & ((1 << m) - 1)
    max_value = (1 + Fraction(top_fraction, 1 << m)) * _power_of_two(top_field - fmt.bias)
    min_normal = _power_of_two(emin)
    min_subnormal = _power_of_two(emin - m) if fmt.subnormals and m > 0 else None
    return _Derived(
        width=width,
        sign_shift=magnitude_bits,
        exponent_mask=exponent_all_ones,
        fraction_mask=(1 << m) - 1,
        exponent_all_ones=exponent_all_ones,
        first_exponent_field=first_field,
        emin=emin,
        max_exponent=_floor_log2(max_value),
        max_magnitude_code=max_code,
        max_value=max_value,
        min_normal=min_normal,
        min_subnormal=min_subnormal,
        smallest_positive_code=smallest_positive,
        has_inf=has_inf,
        has_nan=has_nan,
        has_negative_zero=has_negative_zero,
        has_zero=has_zero,
        default_overflow=default_overflow,
        nan_code=nan_code,
        nan_is_signed=has_nan and fmt.signed and fmt.encoding in ("ieee", "fn"),
        infinity_magnitude_code=infinity_magnitude_code,
        parity_of_code=p3109,
    )


def to_exact_value(x: ValueLike, fmt: FloatFormat | None = None) -> ExactValue:
    """Any supported input as an ExactValue (ValueError for anything else)."""
    if isinstance(x, ExactValue):
        return x
    if isinstance(x, str):
        return parse_value(x, fmt)
    if isinstance(x, bool):
        raise ValueError("a bool is not a number here")
    if isinstance(x, int):
        return ExactValue.of(x)
    if isinstance(x, Fraction):
        return ExactValue.of(x)
    if isinstance(x, float):
        if math.isnan(x):
            return ExactValue.nan(math.copysign(1.0, x) < 0)
        negative = math.copysign(1.0, x) < 0
        if math.isinf(x):
            return ExactValue.infinity(negative)
        return ExactValue("finite", negative, abs(Fraction(x)))
    if isinstance(x, Decimal):
        negative = x.is_signed()
        if x.is_nan():
            return ExactValue.nan(negative)
        if x.is_infinite():
            return ExactValue.infinity(negative)
        # Through the text parser and its exponent limits: Fraction(Decimal("1e999999999"))
        # would build a billion-digit integer (minutes, gigabytes).
        exact = parse_value(str(x.copy_abs()))
        return ExactValue("finite", negative, exact.magnitude)
    # numpy scalars and other number types: through float (numpy floats) or int.
    for convert in (_numpy_like_float, _numpy_like_int, _zero_dimensional_item):
        converted = convert(x)
        if converted is not None:
            return to_exact_value(converted, fmt)
    # An array, a list or a tensor here is one value expected: say where many are taken.
    many = ""
    if isinstance(x, (list, tuple)) or getattr(x, "ndim", 0) > 0:
        many = "; for an array, from_float_array"
    raise ValueError(
        f"cannot round a {type(x).__name__}: give an int, float, Fraction, Decimal, str{many}"
    )


def _numpy_like_float(x: object) -> float | None:
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if kind == "f" and getattr(x, "ndim", 1) == 0:
        return float(x)  # type: ignore[arg-type]
    if kind == "V" and getattr(x, "ndim", 1) == 0:
        # ml_dtypes scalars (bfloat16, float8_*, ...) are numpy "V" kinds; every one of
        # their values is a float64 exactly.
        try:
            return float(x)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
    return None


def _zero_dimensional_item(x: object) -> float | int | None:
    """The number in a 0-d tensor (torch's `loss`, read without importing torch): its
    item() is a Python float or int holding the value exactly."""
    if getattr(x, "ndim", None) != 0 or not callable(getattr(x, "item", None)):
        return None
    value = x.item()  # type: ignore[attr-defined]
    return value if type(value) in (float, int) else None


def _numpy_like_int(x: object) -> int | None:
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if kind in ("i", "u") and getattr(x, "ndim", 1) == 0:
        return int(x)  # type: ignore[call-overload, no-any-return]
    return None


def make_format(
    exponent_bits: int,
    mantissa_bits: int,
    *,
    bias: int | None = None,
    encoding: str = "ieee",
    subnormals: bool | None = None,
    signed: bool | None = None,
    name: str | None = None,
) -> FloatFormat:
    """A custom format. Defaults: bias 2**(e-1)-1 (2**(e-1) for fnuz), subnormals on and a
    sign bit, except for the fnu encoding (unsigned, no subnormals). ValueError when the
    combination is impossible."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; one of {ENCODINGS}")
    if isinstance(exponent_bits, bool) or not isinstance(exponent_bits, int):
        raise ValueError("exponent_bits must be an int")
    if not 1 <= exponent_bits <= MAX_EXPONENT_BITS:
        raise ValueError(f"exponent bits must be 1..{MAX_EXPONENT_BITS}, not {exponent_bits}")
    if subnormals is None:
        subnormals = _default_subnormals(encoding, mantissa_bits)
    if signed is None:
        signed = encoding != "fnu"
    if bias is None:
        bias = default_bias(exponent_bits, encoding)
    fmt = FloatFormat(name or "?", exponent_bits, mantissa_bits, bias, encoding, subnormals, signed)
    if name is None:
        object.__setattr__(fmt, "name", fmt.spec)
    return fmt


def _default_subnormals(encoding: str, mantissa_bits: int) -> bool:
    """Subnormals are on unless fnu; P3109 says a format of precision 1 has none (with no
    fraction bits, exponent field 0 holds only zero either way)."""
    if encoding == "fnu":
        return False
    return not (encoding in P3109_ENCODINGS and mantissa_bits == 0)
