"""How the training panel's pages share a small screen: plots keep a readable height,
word-wrapped texts get the height they need at their width, and a page that cannot hold
both scrolls instead of laying its parts over each other.

Qt's splitters size their children from minimum size hints, which for a word-wrapped label
are one line: at 1024x640 the gradient histogram's card was given less than its texts
needed at its width, and its box layout laid the read-outs over the plot's axis title.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QFontMetricsF, QResizeEvent
from PySide6.QtWidgets import QFrame, QLayout, QScrollArea, QTableWidget, QWidget

# Pixels of data area (the view box, inside the axes) below which a plot is no longer
# read: about four lines of tick labels on the left axis.
READABLE_VIEW_HEIGHT = 48
# The narrowest a plot gets (tick labels and the axis title still fit across it).
PLOT_MIN_WIDTH = 160
# A scrolled page never asks for more height than this: the window's minimum stays small.
SCROLLED_PAGE_MIN_HEIGHT = 160


# Pixels left free between two tick labels of a horizontal axis.
TICK_LABEL_GAP = 3


# A log axis labels 1 x 10^k (every `step`-th decade if even those crowd); where a decade
# has room, then 2 and 5 x 10^k, then the other digits, each where it clears its neighbours.
LOG_LABEL_DIGITS = ((2, 5), (3, 4, 6, 7, 8, 9))
# Pixels a decade needs before its unlabelled 2..9 ticks are drawn (9 to 10 is 0.046 of a
# decade: about 2 px apart at this height).
LOG_MINOR_TICKS_FROM = 44.0


class SpacedTicksAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
    """An axis whose tick labels never run into each other: horizontal on a linear scale,
    either orientation on a log scale.

    pyqtgraph picks a tick spacing from the axis length alone (about log(pixels) ticks), not
    from the labels' width: on a narrow plot at 1024x640 "5", "10" and "15" were drawn over
    each other. The spacing grows through 1, 2, 5 x 10^k until the widest label and a gap
    fit between two ticks; the ticks in between are left out (unlabelled ticks would come
    back with their own labels wherever pyqtgraph judged them sparse enough).

    On a log scale pyqtgraph labels every digit of a decade whatever the length: the loss
    plot at 1024x640 drew "0.2" to "0.9" over each other in 80 px. See `logTickValues`.
    """

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels: list[tuple[float, float]] = super().tickSpacing(minVal, maxVal, size)
        if self.orientation not in ("bottom", "top") or not levels or size <= 0:
            return levels
        if not maxVal > minVal or not math.isfinite(maxVal - minVal):
            return levels
        font = self.style["tickFont"] or self.font()
        metrics = QFontMetricsF(font)
        units_per_pixel = (maxVal - minVal) / size
        spacing = float(levels[0][0])
        for _ in range(64):  # a bound: each pass multiplies the spacing by 2 to 2.5
            first = math.ceil(minVal / spacing) * spacing
            count = int((maxVal - first) // spacing) + 1
            values = [first + index * spacing for index in range(max(count, 0))]
            labels = self.tickStrings(values, self.autoSIPrefixScale * self.scale, spacing)
            widest = max((metrics.horizontalAdvance(text) for text in labels), default=0.0)
            if spacing / units_per_pixel >= widest + TICK_LABEL_GAP:
                break
            spacing = _next_nice(spacing)
        if spacing == levels[0][0]:
            return levels
        return [(spacing, 0.0)]

    def __init__(self, orientation: str, **options: object) -> None:
        super().__init__(orientation, **options)
        self._linear_text_levels = int(self.style["maxTextLevel"])

    def setLogMode(self, *args: object, **kwargs: object) -> None:
        super().setLogMode(*args, **kwargs)
        # On a log scale only the first level is labelled (chosen to fit by logTickValues);
        # the second holds unlabelled ticks.
        self.setStyle(maxTextLevel=0 if self.logMode else self._linear_text_levels)

    def logTickValues(
        self, minVal: float, maxVal: float, size: float, stdTicks: object
    ) -> list[tuple[float | None, list[float]]]:
        """Labelled ticks (see `LOG_LABEL_DIGITS`), each clear of its neighbours' labels,
        then unlabelled ticks at every digit (every decade where those would crowd)."""
        if not maxVal > minVal or not math.isfinite(maxVal - minVal) or size <= 0:
            return []
        # `size` is the axis line's length, which overhangs the view by a pixel at each end.
        pixels_per_decade = max(size - 2.0, 1.0) / (maxVal - minVal)
        metrics = QFontMetricsF(self.style["tickFont"] or self.font())
        decade_step = 1
        labelled = _log_ticks(minVal, maxVal, (1,))
        for _ in range(64):  # a bound: each pass multiplies the step by 2 to 2.5
            if self._labels_fit(labelled, pixels_per_decade, metrics):
                break
            decade_step = round(_next_nice(decade_step))
            labelled = _log_ticks(minVal, maxVal, (1,), decade_step)
        if decade_step == 1:
            for digits in LOG_LABEL_DIGITS:
                for value in _log_ticks(minVal, maxVal, digits):
                    candidate = sorted([*labelled, value])
                    index = candidate.index(value)
                    neighbours = candidate[max(index - 1, 0) : index + 2]
                    if self._labels_fit(neighbours, pixels_per_decade, metrics):
                        labelled = candidate
        if len(labelled) < 2:
            # No two digit x 10^k fit inside (a loss settled between 2.2 and 2.6): label
            # values at a 1, 2, 5 x 10^k step instead, the finest whose labels stay apart.
            linear = self._linear_log_ticks(minVal, maxVal, pixels_per_decade, metrics)
            if len(linear) >= 2:
                labelled = linear
        if pixels_per_decade >= LOG_MINOR_TICKS_FROM:
            minor = _log_ticks(minVal, maxVal, (1, 2, 3, 4, 5, 6, 7, 8, 9))
        else:
            minor = _log_ticks(minVal, maxVal, (1,))
        shown = set(labelled)
        return [(None, labelled), (None, [value for value in minor if value not in shown])]

    def _linear_log_ticks(
        self, low: float, high: float, pixels_per_decade: float, metrics: QFontMetricsF
    ) -> list[float]:
        """log10 of the multiples of the finest 1, 2, 5 x 10^k step in [10^low, 10^high]
        whose labels stay apart (fewer than two when even two do not fit); a label's room
        apart where that still leaves four (labels a line apart over a tall axis are a wall
        of text)."""
        roomy = self._step_multiples(low, high, pixels_per_decade / 2, metrics)
        if len(roomy) >= 4:
            return roomy
        return self._step_multiples(low, high, pixels_per_decade, metrics)

    def _step_multiples(
        self, low: float, high: float, pixels_per_decade: float, metrics: QFontMetricsF
    ) -> list[float]:
        if not -300.0 < low < high < 300.0:  # 10^x stays a finite, non-zero float
            return []
        bottom, top = 10.0**low, 10.0**high
        if not top > bottom:
            return []
        power = math.floor(math.log10(top - bottom)) - 1
        mantissa = 1
        for _ in range(64):  # a bound: the step grows 2 to 2.5 times a pass
            step = mantissa * 10.0**power
            first = max(math.ceil(bottom / step - 1e-9), 1)  # a log axis has no 0
            last = math.floor(top / step + 1e-9)
            if last - first < 1:
                return []
            # Each value as its decimal reads ("2.2", not 22 x 0.1 = 2.2000000000000002).
            values = [math.log10(float(f"{k * mantissa}e{power}")) for k in range(first, last + 1)]
            if self._labels_fit(values, pixels_per_decade, metrics):
                return values
            mantissa = {1: 2, 2: 5, 5: 1}[mantissa]
            power += mantissa == 1
        return []

    def logTickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        """pyqtgraph's labels ("0.2", "5", "2·10⁻⁵") for digit x 10^k ticks; others (a
        narrow range's 2.2 or 1.1·10⁻⁵) with the digits that tell them apart, which
        pyqtgraph's one significant digit rounds away ("2" for 2.2)."""
        standard: list[str] = super().logTickStrings(values, scale, spacing)
        return [
            text if _one_digit(10.0**value * scale) else _decimal_text(10.0**value * scale)
            for value, text in zip(values, standard, strict=True)
        ]

    def _labels_fit(
        self, values: list[float], pixels_per_decade: float, metrics: QFontMetricsF
    ) -> bool:
        """Whether labels at `values` (log10, ascending) stay apart: a line of text between
        two on a vertical axis (stacked as lines of a paragraph are), half of each one's
        width and `TICK_LABEL_GAP` on a horizontal one."""
        if len(values) < 2:
            return True
        if self.orientation in ("left", "right"):
            extents = [metrics.height()] * len(values)
            gap = 0.0
        else:
            labels = self.logTickStrings(values, self.autoSIPrefixScale * self.scale, 1.0)
            extents = [metrics.horizontalAdvance(text) for text in labels]
            gap = TICK_LABEL_GAP
        return all(
            (second - first) * pixels_per_decade >= (first_extent + second_extent) / 2 + gap
            for first, second, first_extent, second_extent in zip(
                values, values[1:], extents, extents[1:], strict=False
            )
        )


def _log_ticks(
    low: float, high: float, digits: tuple[int, ...], decade_step: int = 1
) -> list[float]:
    """log10 of each digit x 10^k in [10^low, 10^high], k a multiple of `decade_step`."""
    first, last = math.floor(low), math.ceil(high)
    first -= first % decade_step
    return [
        value
        for power in range(first, last + 1, decade_step)
        for value in (power + math.log10(digit) for digit in digits)
        if low <= value <= high
    ]


_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _one_digit(number: float) -> bool:
    """Whether `number` is a digit x 10^k (to float rounding)."""
    return math.isclose(float(f"{number:.0e}"), number, rel_tol=1e-9)


def _decimal_text(number: float) -> str:
    """`number` with the fewest significant digits that give it back to 1e-9 (it is a
    short decimal: a tick value), as "2.2", "0.055" or, as pyqtgraph writes powers,
    "1.1·10⁻⁵"."""
    for digits in range(2, 16):
        text = f"{number:.{digits}g}"
        if math.isclose(float(text), number, rel_tol=1e-9):
            break
    mantissa, _, exponent = text.partition("e")
    if not exponent:
        return text
    return f"{mantissa}·10{str(int(exponent)).translate(_SUPERSCRIPTS)}"


def _next_nice(spacing: float) -> float:
    """The next of 1, 2, 5 x 10^k above `spacing`."""
    power = 10.0 ** math.floor(math.log10(spacing))
    mantissa = spacing / power
    for step in (2.0, 5.0, 10.0):
        if mantissa < step * (1 - 1e-9):
            return step * power
    return 20.0 * power


class ReadablePlotWidget(pg.PlotWidget):  # type: ignore[misc]  # pyqtgraph is untyped
    """A plot whose minimum height keeps `view_height` pixels of data area.

    The minimum is its axes' and margins' height plus the view's (read when a layout asks,
    so an axis title or a colour bar added after construction counts); a legend in the
    plot's own layout only takes height above that minimum (see `spare_height`).
    """

    def __init__(self, view_height: int = READABLE_VIEW_HEIGHT, **options: object) -> None:
        super().__init__(**options)
        self.view_height = view_height
        self.setMinimumWidth(PLOT_MIN_WIDTH)  # no explicit height: the hint below rules

    def overhead_height(self) -> float:
        """Pixels of the plot's height that are not data: the bottom axis with its ticks
        and title, the top axis or title where shown, the plot item's margins."""
        item = self.getPlotItem()
        _left, top, _right, bottom = item.layout.getContentsMargins()
        height = float(top + bottom + 2 * self.frameWidth())
        for name in ("bottom", "top"):
            axis = item.getAxis(name)
            if axis.isVisible():
                height += float(axis.maximumHeight())
        if item.titleLabel.isVisible():
            height += float(item.titleLabel.maximumHeight())
        return height

    def minimumSizeHint(self) -> QSize:
        return QSize(PLOT_MIN_WIDTH, math.ceil(self.overhead_height() + self.view_height))

    def spare_height(self) -> int:
        """Pixels of height above the readable minimum: what a legend may take."""
        return max(0, int(self.height()) - self.minimumSizeHint().height())


def table_minimum_height(table: QTableWidget) -> int:
    """A table's header, one row and a horizontal scroll bar: it scrolls for the rest
    (Qt's default minimum, about three rows, was taken from the plots above it)."""
    return (
        table.horizontalHeader().sizeHint().height()
        + table.verticalHeader().defaultSectionSize()
        + table.horizontalScrollBar().sizeHint().height()
        + 2 * table.frameWidth()
    )


def minimum_height_for_width(layout: QLayout, width: int) -> int:
    """The least height `layout` needs at `width`, word-wrapped texts at their height for
    that width (a layout's minimum size counts each of them as one line)."""
    needed = layout.totalMinimumSize().height()
    if layout.hasHeightForWidth():
        needed = max(needed, layout.totalMinimumHeightForWidth(width))
    return needed


def fit_minimum_height(widget: QWidget) -> None:
    """Make `widget`'s minimum height what its layout needs at its present width, so a
    splitter (which reads minimum sizes, not heights for widths) never squeezes it."""
    layout = widget.layout()
    if layout is None or widget.width() <= 0:
        return
    needed = minimum_height_for_width(layout, widget.width())
    if widget.minimumHeight() != needed:
        widget.setMinimumHeight(needed)


def is_layout_event(event: QEvent) -> bool:
    """A change after which a widget's needed height may differ: its width, or a child's
    text or visibility (a layout request)."""
    return event.type() in (QEvent.Type.Resize, QEvent.Type.LayoutRequest)


class PageScrollArea(QScrollArea):
    """A plots page that scrolls vertically once its rows' minimum heights exceed the space
    (a short window): rows keep a readable height rather than overlap.

    Horizontally it never scrolls: its minimum width is the page's, beside the scroll bar,
    as before the page was put in it.
    """

    def __init__(self, page: QWidget) -> None:
        super().__init__()
        self.page = page
        self.setWidget(page)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def minimumSizeHint(self) -> QSize:
        hint = self.page.minimumSizeHint().expandedTo(self.page.minimumSize())
        width = hint.width() + self.verticalScrollBar().sizeHint().width()
        return QSize(width + 2 * self.frameWidth(), min(hint.height(), SCROLLED_PAGE_MIN_HEIGHT))

    def sizeHint(self) -> QSize:
        return self.page.sizeHint().expandedTo(self.minimumSizeHint())


class FormScrollArea(QScrollArea):
    """A scroll area that gives its form the height its wrapped texts need at its width.

    QScrollArea sizes a resizable widget from its minimum size hint and ignores height for
    width, so on a short screen the form was squeezed and its word-wrapped notes overlapped
    the rows under them; with this the form keeps its height and scrolls instead.
    """

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_height()

    def viewportEvent(self, event: QEvent) -> bool:
        # The viewport narrows without the area resizing when the scroll bar appears (the
        # form grew taller than the area): the form's height for the new width then.
        if event.type() == QEvent.Type.Resize:
            self.fit_height()
        return super().viewportEvent(event)

    def fit_height(self) -> None:
        widget = self.widget()
        if widget is not None and widget.hasHeightForWidth():
            needed = widget.heightForWidth(self.viewport().width())
            if needed > 0 and widget.minimumHeight() != needed:
                widget.setMinimumHeight(needed)
