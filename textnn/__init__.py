"""textnn: neural networks for text, from bag-of-words to Transformer-XL."""

from textnn import defaults

__version__ = "0.1.0"


def load(path, device: str = defaults.DEVICE, batch_size: int | None = None, precision: str | None = None):
    """A trained run for use from Python: `textnn.load("runs/NAME").predict(["some text"])` (textnn/api.py).
    `precision` (auto, fp32, bf16): what it computes in; None = the precision the run trained in."""
    from textnn.api import load as load_run  # torch is imported only when a run is loaded

    return load_run(path, device, batch_size, precision)


def serve(runs, host: str = "127.0.0.1", port: int = 8000, **options) -> None:
    """Serve trained runs over HTTP until SIGTERM or Ctrl-C: `textnn.serve(["runs/NAME"], port=8000)` (textnn/api.py,
    textnn/server/; needs the extra textnn[serve])."""
    from textnn.api import serve as serve_runs

    serve_runs(runs, host, port, **options)
