"""The desktop app (PySide6 + pyqtgraph): views and controllers only."""
