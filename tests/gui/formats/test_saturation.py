"""P3109 saturation modes named in the bit editor: the names say what the engine does."""

from __future__ import annotations

import pytest
from pytestqt.qtbot import QtBot

from fpexplorer.formats import OVERFLOW_POLICIES, ExactValue, get_format
from fpexplorer.gui.formats.panel import FormatsPanel
from fpexplorer.gui.formats.saturation import p3109_saturation
from fpexplorer.gui.formats.state import FormatsSession

P3109_NAMES = ("binary8p3se", "binary8p4sf", "binary8p3ue", "binary8p4uf", "binary6p2se")


def outcome(name: str, value: ExactValue, policy: str) -> str:
    """What the engine makes of a value: "±max", "±inf" or "NaN" (positive side)."""
    fmt = get_format(name)
    code = fmt.from_value(value, overflow=policy)
    result = fmt.to_exact(code)
    if result.is_nan:
        return "NaN"
    if result.is_inf:
        return "±inf"
    assert result.magnitude == fmt.max
    return "±max"


@pytest.mark.parametrize("name", P3109_NAMES)
@pytest.mark.parametrize("policy", (None, *OVERFLOW_POLICIES))
def test_the_named_mode_is_what_the_engine_does(name: str, policy: str | None) -> None:
    fmt = get_format(name)
    text = p3109_saturation(fmt, policy)
    assert text is not None
    effective = policy or fmt.default_overflow
    overflow = outcome(name, ExactValue.of(fmt.max * 4), effective)
    infinity = outcome(name, ExactValue.infinity(), effective)
    if text.startswith("P3109 SatFinite"):
        assert overflow == infinity == "±max"
    elif text.startswith("P3109 SatPropagate"):
        assert overflow == "±max"
        assert infinity == ("±inf" if fmt.has_inf else "NaN")
    elif text.startswith("P3109 OvfInf"):
        assert overflow == infinity == ("±inf" if fmt.has_inf else "NaN")
    else:
        assert "none of the draft's saturation modes" in text
        assert overflow == "NaN" and fmt.has_inf  # NaN where the format could say inf
        return
    # The words say where an overflow goes (an unsigned format's only way is up: "+max").
    assert f"→ {overflow if fmt.signed else overflow.replace('±', '+')}" in text


def test_other_formats_have_no_p3109_mode() -> None:
    for name in ("float16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"):
        assert p3109_saturation(get_format(name), "saturate") is None


def test_the_bit_editor_shows_the_mode_and_follows_the_overflow_picker(qtbot: QtBot) -> None:
    session = FormatsSession([get_format("binary8p3se"), get_format("float16")])
    panel = FormatsPanel(session)
    qtbot.addWidget(panel)
    panel.resize(1280, 760)
    panel.show()
    p3109_row, fp16_row = panel.rows
    assert "P3109 OvfInf: overflow → ±inf" in p3109_row.summary.text()
    assert "P3109" not in fp16_row.summary.text()
    picker = panel.entry.overflow
    picker.setCurrentIndex(picker.findData("saturate"))
    picker.activated.emit(picker.currentIndex())
    assert "P3109 SatFinite: overflow and ±inf → ±max" in p3109_row.summary.text()
    assert session.enter_text("1e9")
    assert p3109_row.editor.code == 0x7E  # 49152, the largest finite value
    assert "49152" in p3109_row.summary.text()


@pytest.mark.parametrize("policy", (None, *OVERFLOW_POLICIES))
def test_an_unsigned_format_names_no_negative_max_or_inf(policy: str | None) -> None:
    # binary8p3ue read "SatFinite: overflow and ±inf → ±max": it has no -inf and no -max.
    for name in ("binary8p3ue", "binary8p4uf"):
        text = p3109_saturation(get_format(name), policy)
        assert text is not None and "±" not in text, text
    signed = p3109_saturation(get_format("binary8p3se"), "saturate")
    assert signed == "P3109 SatFinite: overflow and ±inf → ±max"
