"""The bits of one code as a row of cells, grouped and coloured by field.

Mouse: a click toggles a bit; pressing and dragging paints every cell passed over with
the value the first cell got. Keyboard: Left/Right move the cursor, Space or Enter
toggles, 0/1 set the bit and move right, Up/Down step to the next value up/down,
Home/End jump to the ends. The widget holds no number: it shows the code it is given
and reports what the user did through signals.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import (
    QContextMenuEvent,
    QFocusEvent,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QHelpEvent,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QResizeEvent,
)
from PySide6.QtWidgets import QMenu, QSizePolicy, QToolTip, QWidget

from fpexplorer.formats import FloatFormat
from fpexplorer.gui.theme import field_colors

# The window's shortcut for Copy Bits (Edit menu); its context menu names it.
COPY_BITS_SHORTCUT = "Ctrl+Shift+B"
COPY_CODE_SHORTCUT = "Ctrl+Shift+C"
MENU_TEXT_LIMIT = 40  # a 64-bit code's bits are cut in the menu's label, never in the copy
MIN_INDEX_GAP = 3  # pixels between two bit indices, so that "24" "23" never read "2423"
# Under a field too narrow for its name (a one-bit fraction).
SHORT_FIELD_NAMES = {"sign": "s", "exponent": "exp", "fraction": "frac"}
FIELD_HELP = {
    "sign": "Sign bit: 0 for positive, 1 for negative. Flipping it negates the value "
    "(also for zero, infinity and NaN).",
    "exponent": "Exponent field E, stored with a bias: the power of two is E − bias, so "
    "that small and large magnitudes both fit in an unsigned field. E = 0 means zero or a "
    "subnormal; all ones usually means infinity or NaN.",
    "fraction": "Fraction (mantissa) bits f: the significand is 1.f for normal numbers and "
    "0.f for subnormals. More fraction bits = more precision (smaller relative gaps).",
}


def bits_to_copy(fmt: FloatFormat, code: int) -> str:
    """The code in binary as Copy Bits gives it: grouped sign|exponent|fraction as shown, and
    "0b" before bits that are one field (E8M0: no sign, no fraction), which without a "|"
    or the prefix would read back in the value field as a decimal (10000001)."""
    bits = fmt.code_to_bits(code)
    return bits if "|" in bits else f"0b{bits}"


@dataclass(frozen=True, slots=True)
class _Cell:
    bit: int  # bit index in the code (0 = least significant)
    field: str
    rect: QRect


class BitRow(QWidget):
    """Cells for every bit of a code; MSB on the left, indices above, field names below."""

    bit_toggled = Signal(int)
    bit_painted = Signal(int, bool)
    step_requested = Signal(str)  # "up" | "down"
    activated = Signal()

    def __init__(self, parent: QWidget | None = None, *, window_shortcuts: bool = True) -> None:
        """`window_shortcuts`: the context menu names the window's Copy Bits / Copy Code
        keys, which copy the bit editor's active code (not a block editor's scale)."""
        super().__init__(parent)
        self._window_shortcuts = window_shortcuts
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(False)
        self.setAccessibleName("bits")
        self._format: FloatFormat | None = None
        self._code = 0
        self._cursor = 0  # bit index under the keyboard cursor
        self._paint_value: bool | None = None
        self._painted: set[int] = set()
        self._cells: list[_Cell] = []
        self._groups: list[tuple[str, QRect]] = []
        self._cached_key: tuple[object, ...] | None = None
        self._sprites: dict[tuple[str, bool], QPixmap] = {}
        self._static = QPixmap()

    # -- model side ----------------------------------------------------------------------
    def set_format(self, fmt: FloatFormat) -> None:
        if fmt != self._format:
            self._format = fmt
            self._cursor = min(self._cursor, fmt.width - 1)
            self._relayout()
            self.updateGeometry()
        self.update()

    def set_code(self, code: int) -> None:
        self._code = code
        self.update()

    @property
    def cursor_bit(self) -> int:
        return self._cursor

    def cell_rect(self, bit: int) -> QRect:
        """Where a bit's cell is drawn (tests click there)."""
        for cell in self._cells:
            if cell.bit == bit:
                return cell.rect
        raise IndexError(bit)

    # -- geometry ------------------------------------------------------------------------
    def _fields(self) -> list[tuple[str, list[int]]]:
        fmt = self._format
        if fmt is None:
            return []
        m, e = fmt.mantissa_bits, fmt.exponent_bits
        fields: list[tuple[str, list[int]]] = []
        if fmt.signed:
            fields.append(("sign", [fmt.width - 1]))
        fields.append(("exponent", list(range(m + e - 1, m - 1, -1))))
        if m:
            fields.append(("fraction", list(range(m - 1, -1, -1))))
        return fields

    def _metrics(self) -> tuple[int, int, int, int]:
        """Cell width, cell height, index-row height and label-row height for this font."""
        metrics = QFontMetrics(self.font())
        preferred = max(metrics.horizontalAdvance("00") + 10, 22)
        height = metrics.height() + 6
        small = QFontMetrics(self._small_font())
        return preferred, height, small.height(), small.height()

    def _small_font(self) -> QFont:
        font = QFont(self.font())
        size = font.pointSizeF()
        if size > 0:
            font.setPointSizeF(max(size * 0.8, 6.5))
        return font

    def sizeHint(self) -> QSize:
        width, height, index_h, label_h = self._metrics()
        bits = self._format.width if self._format else 32
        groups = len(self._fields()) or 3
        return QSize(bits * width + groups * width // 2 + 4, index_h + height + label_h + 2)

    def minimumSizeHint(self) -> QSize:
        _, height, index_h, label_h = self._metrics()
        bits = self._format.width if self._format else 32
        return QSize(min(bits * 9 + 20, 600), index_h + height + label_h + 2)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self._relayout()
        super().resizeEvent(event)

    def _relayout(self) -> None:
        fields = self._fields()
        if not fields:
            self._cells, self._groups = [], []
            return
        preferred, height, index_h, _ = self._metrics()
        bits = sum(len(b) for _, b in fields)
        gaps = len(fields) - 1
        available = max(self.width() - 4, 40)
        # Cells shrink (down to a few pixels) rather than overflow a narrow window.
        width = max(min(preferred, int(available / (bits + gaps * 0.5))), 6)
        gap = width // 2
        x = 2 + max(0, (available - (bits * width + gaps * gap)) // 2)
        cells: list[_Cell] = []
        groups: list[tuple[str, QRect]] = []
        top = index_h
        for name, field_bits in fields:
            start = x
            for bit in field_bits:
                cells.append(_Cell(bit, name, QRect(x, top, width, height)))
                x += width
            groups.append((name, QRect(start, top, x - start, height)))
            x += gap
        self._cells, self._groups = cells, groups

    def _cell_at(self, point: QPoint) -> _Cell | None:
        for cell in self._cells:
            if cell.rect.adjusted(0, -200, 0, 200).contains(point):
                return cell
        return None

    # -- painting ------------------------------------------------------------------------
    # A toggle repaints every stacked row, so painting is cheap: each cell is one cached
    # sprite (rounded box + digit, per field and bit value) and the indices and field
    # names are one cached picture, both rebuilt only when size, format or palette change.
    def _cache_key(self) -> tuple[object, ...]:
        palette = self.palette()
        return (
            self.size().width(),
            self.size().height(),
            self.devicePixelRatioF(),
            self._format,
            palette.color(QPalette.ColorRole.Base).rgba(),
            palette.color(QPalette.ColorRole.WindowText).rgba(),
            self.font().key(),
        )

    def _ensure_caches(self) -> None:
        key = self._cache_key()
        if key == self._cached_key:
            return
        self._cached_key = key
        ratio = self.devicePixelRatioF()
        cell = self._cells[0].rect
        bold = QFont(self.font())
        bold.setBold(True)
        show_digits = QFontMetrics(bold).horizontalAdvance("0") + 2 <= cell.width()
        self._sprites = {}
        for name, _ in self._groups:
            colors = field_colors(name)
            for is_one in (False, True):
                sprite = QPixmap(round(cell.width() * ratio), round(cell.height() * ratio))
                sprite.setDevicePixelRatio(ratio)
                sprite.fill(Qt.GlobalColor.transparent)
                painter = QPainter(sprite)
                painter.setRenderHint(QPainter.RenderHint.Antialiasing)
                box = QRect(1, 1, cell.width() - 2, cell.height() - 2)
                painter.setPen(QPen(colors.one.darker(130), 1))
                painter.setBrush(colors.one if is_one else colors.zero)
                painter.drawRoundedRect(box, 3, 3)
                if show_digits:
                    painter.setFont(bold)
                    painter.setPen(colors.text_one if is_one else colors.text_zero)
                    painter.drawText(box, Qt.AlignmentFlag.AlignCenter, "1" if is_one else "0")
                painter.end()
                self._sprites[(name, is_one)] = sprite
        static = QPixmap(round(self.width() * ratio), round(self.height() * ratio))
        static.setDevicePixelRatio(ratio)
        static.fill(Qt.GlobalColor.transparent)
        painter = QPainter(static)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        self._paint_labels(painter)
        painter.end()
        self._static = static

    def _paint_labels(self, painter: QPainter) -> None:
        """Bit indices above the cells and field names below them."""
        text_color = self.palette().color(QPalette.ColorRole.WindowText)
        small = self._small_font()
        small_metrics = QFontMetrics(small)
        painter.setFont(small)
        painter.setPen(text_color)
        for bit, text_rect in self.index_labels():
            # Drawn centred in a wider box: a box of exactly the text's width may clip it.
            box = text_rect.adjusted(-6, 0, 6, 0)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, str(bit))
        for (_, rect), text in zip(self._groups, self.field_labels(), strict=True):
            label_rect = QRect(
                rect.left() - 10, rect.bottom() + 1, rect.width() + 20, small_metrics.height()
            )
            painter.drawText(label_rect, Qt.AlignmentFlag.AlignCenter, text)

    def index_labels(self) -> list[tuple[int, QRect]]:
        """The bit indices drawn above the cells, each with the rectangle its text takes:
        every index where the cells are wide enough, else the fields' edges and every 4th,
        leaving out any that would touch one already placed (edges first). In FP32's 9-pixel
        cells "24" and "23" ran together into "2423"."""
        if not self._cells:
            return []
        metrics = QFontMetrics(self._small_font())
        cell_width = self._cells[0].rect.width()
        index_every = 1 if metrics.horizontalAdvance("63") + 2 <= cell_width else 4
        edges, others = [], []
        for cell in self._cells:
            group = self._group_rect(cell.field)
            if cell.rect.left() == group.left() or cell.rect.right() == group.right():
                edges.append(cell)
            elif cell.bit % index_every == 0:
                others.append(cell)
        placed: list[tuple[int, QRect]] = []
        for cell in edges + others:
            text_width = metrics.horizontalAdvance(str(cell.bit))
            center = cell.rect.left() + cell.rect.width() // 2
            text_rect = QRect(center - text_width // 2, 0, text_width, cell.rect.top())
            # A gap of at least MIN_INDEX_GAP pixels from every index already placed.
            room = text_rect.adjusted(-MIN_INDEX_GAP, 0, MIN_INDEX_GAP, 0)
            if all(not room.intersects(other) for _, other in placed):
                placed.append((cell.bit, text_rect))
        return sorted(placed, key=lambda item: -item[0])

    def field_labels(self) -> list[str]:
        """The name under each field, the longest that fits: "fraction (10)", "fraction",
        "frac" (FP4's one fraction bit), or nothing when even that does not fit."""
        metrics = QFontMetrics(self._small_font())
        labels = []
        for name, rect in self._groups:
            label = name if name != "exponent" or rect.width() > 60 else "exp"
            count = len(self._group_bits(name))
            candidates = [label] if name == "sign" else [f"{label} ({count})", label]
            candidates.append(SHORT_FIELD_NAMES[name])
            fitting = (
                text for text in candidates if metrics.horizontalAdvance(text) <= rect.width() + 8
            )
            labels.append(next(fitting, ""))
        return labels

    def paintEvent(self, event: QPaintEvent) -> None:
        if not self._cells:
            return
        self._ensure_caches()
        painter = QPainter(self)
        painter.drawPixmap(0, 0, self._static)
        code = self._code
        sprites = self._sprites
        for cell in self._cells:
            sprite = sprites[(cell.field, bool((code >> cell.bit) & 1))]
            painter.drawPixmap(cell.rect.topLeft(), sprite)
        if self.hasFocus():
            for cell in self._cells:
                if cell.bit == self._cursor:
                    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
                    painter.setBrush(Qt.BrushStyle.NoBrush)
                    painter.setPen(QPen(self.palette().color(QPalette.ColorRole.Highlight), 2))
                    painter.drawRoundedRect(cell.rect.adjusted(0, 0, -1, -1), 4, 4)
        painter.end()

    def _group_rect(self, name: str) -> QRect:
        for group, rect in self._groups:
            if group == name:
                return rect
        return QRect()

    def _group_bits(self, name: str) -> list[int]:
        for field, bits in self._fields():
            if field == name:
                return bits
        return []

    # -- mouse ---------------------------------------------------------------------------
    def copy_texts(self) -> list[tuple[str, str, str]]:
        """(label, shortcut, text) of each copy the context menu offers: the bits grouped
        sign|exponent|fraction as the read-outs show them, and the code in hex. Both read
        back in the value field (0|01111|0000000000, 0x3C00)."""
        fmt = self._format
        if fmt is None:
            return []
        code = self._code
        return [
            ("Copy Bits", COPY_BITS_SHORTCUT, bits_to_copy(fmt, code)),
            ("Copy Code (hex)", COPY_CODE_SHORTCUT, f"0x{code:0{(fmt.width + 3) // 4}X}"),
        ]

    def context_menu(self) -> QMenu:
        """The right-click menu: each copy with its text (cut when long) and its shortcut."""
        menu = QMenu(self)
        for label, shortcut, text in self.copy_texts():
            shown = text if len(text) <= MENU_TEXT_LIMIT else text[:MENU_TEXT_LIMIT] + "…"
            # After a tab Qt shows the window's shortcut, without claiming the key here.
            keys = f"\t{shortcut}" if self._window_shortcuts else ""
            action = menu.addAction(f"{label}  {shown}{keys}")
            action.triggered.connect(
                lambda _checked=False, copied=text: QGuiApplication.clipboard().setText(copied)
            )
        return menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.context_menu()
        menu.exec(event.globalPos())
        menu.deleteLater()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self.activated.emit()
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self._cell_at(event.position().toPoint())
        if cell is None:
            return
        self._cursor = cell.bit
        self._paint_value = not bool((self._code >> cell.bit) & 1)
        self._painted = {cell.bit}
        self.bit_toggled.emit(cell.bit)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._paint_value is None:
            return
        cell = self._cell_at(event.position().toPoint())
        if cell is None or cell.bit in self._painted:
            return
        self._painted.add(cell.bit)
        self._cursor = cell.bit
        if bool((self._code >> cell.bit) & 1) != self._paint_value:
            self.bit_painted.emit(cell.bit, self._paint_value)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        self._paint_value = None
        self._painted = set()

    # -- keyboard ------------------------------------------------------------------------
    def keyPressEvent(self, event: QKeyEvent) -> None:
        if self._format is None:
            return
        key = event.key()
        top = self._format.width - 1
        if key == Qt.Key.Key_Left:
            self._cursor = min(self._cursor + 1, top)
        elif key == Qt.Key.Key_Right:
            self._cursor = max(self._cursor - 1, 0)
        elif key == Qt.Key.Key_Home:
            self._cursor = top
        elif key == Qt.Key.Key_End:
            self._cursor = 0
        elif key in (Qt.Key.Key_Space, Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.bit_toggled.emit(self._cursor)
        elif key in (Qt.Key.Key_0, Qt.Key.Key_1):
            value = key == Qt.Key.Key_1
            if bool((self._code >> self._cursor) & 1) != value:
                self.bit_painted.emit(self._cursor, value)
            self._cursor = max(self._cursor - 1, 0)
        elif key == Qt.Key.Key_Up:
            self.step_requested.emit("up")
        elif key == Qt.Key.Key_Down:
            self.step_requested.emit("down")
        else:
            super().keyPressEvent(event)
            return
        self.update()

    def focusInEvent(self, event: QFocusEvent) -> None:
        self.activated.emit()
        self.update()
        super().focusInEvent(event)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        self.update()
        super().focusOutEvent(event)

    # -- help ----------------------------------------------------------------------------
    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            cell = self._cell_at(event.pos())
            fmt = self._format
            if cell is None or fmt is None:
                QToolTip.hideText()
                event.ignore()
                return True
            bits = self._group_bits(cell.field)
            position = len(bits) - 1 - bits.index(cell.bit)
            text = f"<b>bit {cell.bit}</b>: {cell.field} bit {position}"
            if cell.field == "exponent":
                text += f" (bias {fmt.bias})"
            text += f"<br>{FIELD_HELP[cell.field]}<br><i>Click toggles, drag paints, "
            text += "arrows move, space toggles, Up/Down step.</i>"
            QToolTip.showText(event.globalPos(), text, self)
            return True
        return super().event(event)
