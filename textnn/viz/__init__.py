"""Views of what a model does: plots, attention maps and LSTM cells, as files and as data (`textnn serve`)."""

from textnn.errors import TextnnError


class NothingToShow(TextnnError):
    """A run without what a view shows (attention weights, LSTM memory cells); the HTTP server answers 400."""
