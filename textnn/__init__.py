"""textnn: neural networks for text, from bag-of-words to Transformer-XL."""

from textnn import defaults

__version__ = "0.1.0"


def load(path, device: str = defaults.DEVICE, batch_size: int | None = None):
    """A trained run for use from Python: `textnn.load("runs/NAME").predict(["some text"])` (textnn/api.py)."""
    from textnn.api import load as load_run  # torch is imported only when a run is loaded

    return load_run(path, device, batch_size)
