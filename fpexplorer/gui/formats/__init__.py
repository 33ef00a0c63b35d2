"""The Formats panel: bit editors and the views that explain a code."""
