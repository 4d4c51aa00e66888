"""`textnn serve`: trained runs behind an HTTP API, on FastAPI and uvicorn (the optional extra `textnn[serve]`).

    served.py      a run loaded once, and what each endpoint asks of it (inputs into the task's examples,
                   predictions into what `textnn predict` prints, a prompt into what `textnn generate` gives)
    batching.py    a run's thread and its bounded queue: concurrent requests gathered into one forward pass
    bodies.py      request bodies read and checked, an error naming the field at fault
    completions.py the OpenAI completions API's shapes over a language-model run
    metrics.py     counters and histograms, written in Prometheus' text format
    app.py         `create_app` (the FastAPI application) and `serve` (uvicorn, stopped gracefully by SIGTERM)
    static/        the browser page's files: index.html, when there, is served at /

Importing this package needs neither FastAPI nor uvicorn: `create_app` and `serve` say how to install them
when they are missing. The layer of its own sits on the front layer (textnn/front.py) and below the
commands and the Python API.
"""

from __future__ import annotations

from importlib.util import find_spec

from textnn.errors import TextnnError

EXTRA = ("fastapi", "uvicorn")


def require_extra() -> None:
    """Refuse in one line, saying what to install, where FastAPI or uvicorn is missing."""
    missing = [name for name in EXTRA if find_spec(name) is None]
    if missing:
        raise TextnnError(f"textnn serve needs {' and '.join(missing)}, which the core install leaves out: "
                          f"pip install 'textnn[serve]' (or pip install {' '.join(EXTRA)})")


def create_app(runs, **options):
    """The FastAPI application serving `runs` (see textnn/server/app.py `create_app` for the options), for
    an ASGI server of one's own: e.g. `gunicorn -k uvicorn.workers.UvicornWorker -w 4
    'textnn.server:create_app(["runs/sst2_cnn_rand"])'`, each worker process loading the runs once."""
    require_extra()
    from textnn.server import app

    return app.create_app(runs, **options)


def serve(runs, host: str = "127.0.0.1", port: int = 8000, grace: float = 10.0, **options) -> None:
    """Serve `runs` at http://host:port until SIGTERM or Ctrl-C (textnn/server/app.py `serve`)."""
    require_extra()
    from textnn.server import app

    app.serve(runs, host, port, grace, **options)
