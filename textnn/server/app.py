"""The FastAPI application of `textnn serve` (`create_app`) and the server that runs it (`serve`).

Endpoints (the JSON shapes are in README's "Serve" section):
    GET  /health                       {"status": "ok", "runs": [names]}
    GET  /v1/runs                      {"runs": [{name, task, family, precision, device, endpoints}]}
    POST /v1/runs/{name}/predict       {"inputs": [...]} -> {"predictions": [...]}, as `textnn predict` prints
    POST /v1/runs/{name}/translate     {"inputs", "beam_size", "n_best", "length_penalty"} -> {"predictions"}
    POST /v1/runs/{name}/generate      {"prompt", "num_samples", "stream", decoding fields} -> as `generate`
    POST /v1/runs/{name}/inspect       {"input"} -> attention or LSTM cells over it (viz/inspection.py)
    POST /v1/completions, GET /v1/models   OpenAI's shapes (completions.py)
    GET  /metrics                      Prometheus text (metrics.py)

Each request is read and checked in the event loop's thread pool, then queued for its run's own thread
(batching.py), which gathers concurrent requests into one forward pass; the event loop only waits. An
error is `{"error": {"message", "type", "param", "code"}}` (OpenAI's shape) with its status: 400 an endpoint
the run has not, 404 an unknown run, 413 the input-size policy (`textnn explain limits`), 422 a body that
is not JSON or a field that is wrong (`param` names it), 429 a full queue (with Retry-After), 503 stopping.
No endpoint reads a file that a request names.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import sys
import threading
import time
from functools import partial
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from textnn import defaults, experiment, limits
from textnn.errors import TextnnError
from textnn.files import json_text
from textnn.server import completions
from textnn.server.batching import Batcher, Cancelled, Job, QueueFull, Stopping
from textnn.server.bodies import Field, RequestError, parse_json, read_fields
from textnn.server.metrics import Metrics
from textnn.server.served import GENERATE_FIELDS, PREDICT_FIELDS, TRANSLATE_FIELDS, ServedRun, generation_answer, \
    refusal
from textnn.viz import NothingToShow, inspection

MAX_BODY = limits.MAX_LINE_BYTES  # a request body is at most one line of input long
STATIC = Path(__file__).parent / "static"  # the browser page's files: index.html is served at /
ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
               413: "request_too_large", 422: "invalid_request_error", 429: "queue_full", 500: "server_error",
               503: "unavailable"}
REFUSALS = {400: "invalid", 413: "too_large", 422: "invalid", 429: "queue_full", 503: "stopping"}
INSPECT_FIELDS = {"input": Field("string", required=True)}  # one text, line breaks allowed (a view reads it whole)
CLIENT_GONE = 499  # counted for a request whose client went away before its answer (nginx's code for it)


class ClientGone(Exception):
    """The client closed its connection before its answer was ready: its queued work was dropped."""


def json_response(value: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json_text(value, ensure_ascii=False), status, headers, media_type="application/json")


def error_response(status: int, message: str, param: str | None = None, headers: dict | None = None) -> Response:
    return json_response({"error": {"message": message, "type": ERROR_TYPES.get(status, "error"), "param": param,
                                    "code": status}}, status, headers)


def sse(value: object) -> str:
    """One server-sent event holding a JSON value."""
    return f"data: {json_text(value, ensure_ascii=False)}\n\n"


class Service:
    """The runs, their threads and the counters behind one application."""

    def __init__(self, runs, max_batch: int, max_wait_ms: float, queue_size: int, device: str,
                 threads: int | None, precision: str | None):
        if isinstance(runs, (str, Path)):
            runs = [runs]
        if not runs:
            raise TextnnError("serve: give at least one run directory")
        checks = ((isinstance(max_batch, int) and 1 <= max_batch <= limits.MAX_BATCH, "--max-batch", max_batch,
                   f"an integer in [1, {limits.MAX_BATCH:,}]"),
                  (isinstance(queue_size, int) and queue_size >= 1, "--queue", queue_size, "an integer >= 1"),
                  (isinstance(max_wait_ms, (int, float)) and math.isfinite(max_wait_ms) and max_wait_ms >= 0,
                   "--max-wait-ms", max_wait_ms, "a number of milliseconds >= 0"))
        for ok, option, value, expected in checks:
            if not ok:
                raise TextnnError(f"{option}: got {value!r}, expected {expected}")
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.metrics = Metrics()
        self.runs: dict[str, ServedRun] = {}
        self.batchers: dict[str, Batcher] = {}
        for path in runs:
            served = ServedRun(path, device, precision)
            if served.name in self.runs:
                raise TextnnError(f"{path}: a run named {served.name} is served already ({self.runs[served.name].path}); "
                                  f"runs are served by their directory's name, so give runs of different names")
            self.runs[served.name] = served
            batcher = Batcher(served.name, max_batch, max_wait_ms / 1000, queue_size,
                              on_batch=partial(self.metrics.batch, served.name),
                              on_drop=partial(self.metrics.drop, served.name), threads=threads)
            self.batchers[served.name] = batcher
            self.metrics.watch_queue(served.name, lambda batcher=batcher: batcher.depth)
        self.created = {name: int(served.path.joinpath("model.safetensors").stat().st_mtime)
                        for name, served in self.runs.items()}

    def start(self) -> None:
        for batcher in self.batchers.values():
            batcher.start()

    def drain(self) -> None:
        for batcher in self.batchers.values():
            batcher.drain()

    def stop(self) -> None:
        for batcher in self.batchers.values():
            batcher.stop()

    def run(self, name: str, endpoint: str) -> ServedRun:
        served = self.runs.get(name)
        if served is None:
            raise RequestError(404, f"no run named {name!r}; this server has {', '.join(self.runs)} (GET /v1/runs)",
                               "model" if endpoint == "completions" else None)
        served.require(endpoint)
        return served

    # --- waiting for a run's thread --------------------------------------------------------------------
    def submit(self, name: str, job: Job) -> None:
        try:
            self.batchers[name].submit(job)
        except QueueFull as err:
            raise RequestError(429, str(err), headers={"Retry-After": "1"}) from None
        except Stopping as err:
            raise RequestError(503, str(err)) from None

    async def outcome(self, request: Request, name: str, work: object, compute, key=None, size: int = 1,
                      cancelled: threading.Event | None = None):
        """The result of `compute([work, ...])` for this work, computed by the run's thread (with the works of
        other requests of the same `key`); the work is dropped if the client goes away first, and `cancelled`
        (the job's event, which a computation may check) is set then."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(result, error) -> None:
            if not future.done():
                future.set_exception(error) if error is not None else future.set_result(result)

        job = Job(work, compute, lambda result, error: loop.call_soon_threadsafe(settle, result, error), key, size,
                  cancelled=cancelled if cancelled is not None else threading.Event())
        self.submit(name, job)
        try:
            return await self.until(request, future, name, job)
        except TextnnError as err:  # a request's input that the task refused
            message = str(err)
            raise refusal(err, message.split(":")[0] if message.startswith("inputs[") else None) from None

    async def generations(self, request: Request, served: ServedRun, requests: list) -> list:
        """The `Generation` of each of a request's `requests` (lm.Request), decoded by the run's thread beside
        those of other requests of the same key (`ServedRun.generation_key`); the client going away stops
        them at their next token."""
        key = await run_in_threadpool(served.generation_key, requests)
        cancelled = threading.Event()

        def compute(works):  # works: (requests, cancelled) of each job
            owner = [number for number, (asked, _) in enumerate(works) for _ in asked]
            found = iter(served.generate_many([each for asked, _ in works for each in asked],
                                              lambda index: works[owner[index]][1].is_set()))
            answers = [[next(found) for _ in asked] for asked, _ in works]
            return [Cancelled(f"run {served.name}: the client went away") if None in answer else answer
                    for answer in answers]

        return await self.outcome(request, served.name, (requests, cancelled), compute, key,
                                  sum(each.num_samples for each in requests), cancelled)

    async def until(self, request: Request, awaitable, name: str, job: Job):
        """Wait for `awaitable`, or for the client to go away: then its job is taken out (ClientGone)."""
        waited = asyncio.ensure_future(awaitable)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({waited, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not waited.done():
            waited.cancel()
            self.batchers[name].cancel(job)
            raise ClientGone
        return waited.result()

    async def streamed(self, request: Request, served: ServedRun, prompt: str, decoding):
        """The events of one generation as its text comes: ("text", piece) ..., then ("done", Generation) or
        ("error", exception). The first is waited for here, so that an error before any text (a prompt of
        unknown words) is the request's answer; after it, the client going away stops the generation."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        job: Job

        def on_text(piece: str) -> None:  # in the run's thread
            if job.cancelled.is_set():
                raise Cancelled(f"run {served.name}: the client went away")
            loop.call_soon_threadsafe(events.put_nowait, ("text", piece))

        def deliver(result, error) -> None:
            loop.call_soon_threadsafe(events.put_nowait, ("error", error) if error is not None else ("done", result))

        job = Job(None, lambda works: [served.generate(prompt, decoding, 1, on_text)], deliver)
        self.submit(served.name, job)
        first = await self.until(request, events.get(), served.name, job)
        if first[0] == "error":
            if isinstance(first[1], TextnnError):
                raise refusal(first[1])
            raise first[1]
        batcher = self.batchers[served.name]

        async def following():
            try:
                yield first
                while first[0] == "text":
                    event = await events.get()
                    yield event
                    if event[0] != "text":
                        return
            finally:
                batcher.cancel(job)  # the client went away mid-stream: the generation stops at its next token

        return following()


async def _disconnected(request: Request) -> None:
    """Return once the client has closed its connection (the body was read before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _body(request: Request) -> object:
    """The request's JSON body, refused (413) past MAX_BODY bytes before more is read."""
    too_large = RequestError(413, f"body: more than {MAX_BODY // 2 ** 20} MiB, the limit of one input line "
                                  f"(`textnn explain limits`); send fewer or shorter inputs per request", "body")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > MAX_BODY:
            raise too_large
    return await run_in_threadpool(parse_json, bytes(raw))


class _Measured:
    """ASGI middleware: each HTTP request counted with its status and timed to the end of its answer."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.request(scope["path"], status[0], time.perf_counter() - started)


def create_app(runs, max_batch: int = 32, max_wait_ms: float = 5.0, queue_size: int = 256,
               device: str = defaults.DEVICE, threads: int | None = None, precision: str | None = None) -> FastAPI:
    """The FastAPI application serving `runs` (run directories, each loaded once here: a damaged run, or one
    still training, is refused now with a TextnnError). `max_batch`: items of concurrent requests computed
    in one forward pass (1: each request alone); `max_wait_ms`: how long the first request of a batch waits
    for more; `queue_size`: requests a run holds waiting before it answers 429; `device`, `threads`,
    `precision` as the commands' --device, --threads and --precision. Run it under any ASGI server; its
    runs' threads start with the application (its lifespan)."""
    service = Service(runs, max_batch, max_wait_ms, queue_size, device, threads, precision)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.start()
        yield
        await run_in_threadpool(service.stop)

    app = FastAPI(title="textnn", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.add_middleware(_Measured, metrics=service.metrics)

    @app.exception_handler(RequestError)
    async def refused(request: Request, err: RequestError):
        if err.status in REFUSALS:
            service.metrics.refused(REFUSALS[err.status])
        return error_response(err.status, err.message, err.param, err.headers)

    @app.exception_handler(ClientGone)
    async def gone(request: Request, err: ClientGone):
        return Response(status_code=CLIENT_GONE)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        message = f"{request.method} {request.url.path}: {err.detail}"
        if err.status_code == 404:
            message += "; the endpoints are under /v1 (GET /v1/runs lists the runs and theirs)"
        return error_response(err.status_code, message, headers=getattr(err, "headers", None))

    @app.get("/")
    async def page():
        if not (STATIC / "index.html").is_file():
            raise RequestError(404, "no page here: the API is under /v1 (GET /v1/runs lists the runs and their "
                                    "endpoints)")
        return FileResponse(STATIC / "index.html")

    @app.get("/health")
    async def health():
        return json_response({"status": "ok", "runs": list(service.runs)})

    @app.get("/metrics")
    async def metrics():
        return Response(service.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/runs")
    async def runs_list():  # "inspect": what the run's inspect view shows (viz/inspection.py), or null
        return json_response({"runs": [{**served.describe(), "inspect": inspection.kind_of(served.task, served.model)}
                                       for served in service.runs.values()]})

    @app.post("/v1/runs/{name}/inspect")
    async def inspect(request: Request, name: str):
        served = service.runs.get(name) or service.run(name, "inspect")  # an unknown run: 404 naming the runs
        text = read_fields(await _body(request), INSPECT_FIELDS, "an inspect request")["input"]
        served.check_prompt(text, "input")
        precision = partial(experiment.in_run_precision, served.config, served.model)

        def compute(works):  # in the run's thread; a run with nothing to show is answered 400, not as a bad input
            try:
                return [inspection.inspect(served.task, served.model, text, precision, name)]
            except NothingToShow as err:
                return [RequestError(400, str(err), "input")]

        found = await service.outcome(request, name, None, compute)
        if isinstance(found, RequestError):
            raise found
        return json_response(found)

    async def predictions(request: Request, name: str, endpoint: str, spec: dict) -> Response:
        served = service.run(name, endpoint)
        body = await _body(request)

        def read():
            fields = read_fields(body, spec, f"a {endpoint} request")
            return served.options(fields), served.examples(fields["inputs"])

        options, examples = await run_in_threadpool(read)
        given = [example for example in examples if example is not None]
        found = await service.outcome(request, name, given, partial(served.predict, options), key=(endpoint, options),
                                      size=len(given)) if given else []
        lines = served.printed(examples, found)
        return Response('{"predictions": [' + ", ".join(lines) + "]}", media_type="application/json")

    @app.post("/v1/runs/{name}/predict")
    async def predict(request: Request, name: str):
        return await predictions(request, name, "predict", PREDICT_FIELDS)

    @app.post("/v1/runs/{name}/translate")
    async def translate(request: Request, name: str):
        return await predictions(request, name, "translate", TRANSLATE_FIELDS)

    @app.post("/v1/runs/{name}/generate")
    async def generate(request: Request, name: str):
        served = service.run(name, "generate")
        fields = read_fields(await _body(request), GENERATE_FIELDS, "a generate request")
        decoding = served.decoding({key: fields[key] for key in GENERATE_FIELDS if key not in
                                    ("prompt", "num_samples", "stream")})
        prompt, samples, stream = fields["prompt"], fields["num_samples"], fields["stream"]
        served.check_prompt(prompt)
        served.check_samples(decoding, samples, stream)
        if not stream:
            [found] = await service.generations(request, served, served.requests([prompt], decoding, samples))
            return json_response(generation_answer(found, decoding))
        events = await service.streamed(request, served, prompt, decoding)

        async def written():
            async for kind, value in events:
                if kind == "text":
                    yield sse({"text": value})
                elif kind == "done":
                    yield sse({"done": True, **generation_answer(value, decoding)})
                else:
                    yield sse({"error": {"message": str(value), "type": "server_error", "param": None, "code": 500}})

        return _event_stream(written())

    @app.get("/v1/models")
    async def models():
        names = [name for name, served in service.runs.items() if "completions" in served.endpoints]
        return json_response(completions.models(names, service.created))

    @app.post("/v1/completions")
    async def complete(request: Request):
        fields = read_fields(await _body(request), completions.COMPLETION_FIELDS, "a completion request")
        completions.check_neutral(fields)
        name = fields["model"]
        served = service.run(name, "completions")
        decoding = served.decoding(completions.decoding_settings(fields))
        prompts = fields["prompt"] if isinstance(fields["prompt"], list) else [fields["prompt"]]
        for number, prompt in enumerate(prompts):
            served.check_prompt(prompt, "prompt" if len(prompts) == 1 else f"prompt[{number}]")
        served.check_samples(decoding, fields["n"], False, "n")
        ident, max_tokens = completions.new_id(), decoding.max_tokens
        if fields["stream"] and len(prompts) == 1 and fields["n"] == 1:
            events = await service.streamed(request, served, prompts[0], decoding)

            async def pieces():
                skip_prompt = bool(prompts[0])  # the first piece of a generation's text is its prompt
                async for kind, value in events:
                    if kind == "text" and skip_prompt:
                        skip_prompt = False
                    elif kind == "text":
                        yield sse(completions.chunk(ident, name, value, seed=decoding.seed))
                    elif kind == "done":
                        yield sse(completions.chunk(ident, name, "", 0, completions.finish_reason(
                            value.new_tokens[0], max_tokens), decoding.seed))
                    else:
                        yield sse({"error": {"message": str(value), "type": "server_error", "param": None,
                                             "code": 500}})
                yield "data: [DONE]\n\n"

            return _event_stream(pieces())
        found = await service.generations(request, served, served.requests(prompts, decoding, fields["n"]))
        answer = completions.completion(ident, name, found, max_tokens)
        if not fields["stream"]:
            return json_response(answer)

        async def whole():  # several choices, streamed: each sent whole once all are done
            for choice in answer["choices"]:
                yield sse(completions.chunk(ident, name, choice["text"], choice["index"], choice["finish_reason"],
                                            decoding.seed))
            yield "data: [DONE]\n\n"

        return _event_stream(whole())

    return app


def _event_stream(events) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# --- running it ----------------------------------------------------------------------------------------------
def serve(runs, host: str = "127.0.0.1", port: int = 8000, grace: float = 10.0, **options) -> None:
    """Serve `runs` over HTTP at host:port until SIGTERM or Ctrl-C (`create_app`'s `options`: max_batch,
    max_wait_ms, queue_size, device, threads, precision). Port 0 takes a free port; the line said at start
    gives the URL. On SIGTERM no new connection is taken, the requests in flight are answered within
    `grace` seconds (what waits for a fuller batch is computed at once), and it returns."""
    if not (isinstance(grace, (int, float)) and math.isfinite(grace) and grace >= 0):
        raise TextnnError(f"--grace: got {grace!r}, expected a number of seconds >= 0")
    app = create_app(runs, **options)  # a run that cannot be served is refused before the port is taken
    listening = _listen(host, port)
    bound = listening.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=grace)
    server = _Server(config, app.state.service, grace)
    try:
        print(f"textnn serve: http://{where}:{bound} ({', '.join(app.state.service.runs)}); GET /v1/runs lists the "
              f"endpoints; stop with Ctrl-C", flush=True)
    except BaseException:
        listening.close()
        raise
    # uvicorn raises the signal that stopped it once more after its shutdown: for SIGTERM, what that shutdown
    # did is the whole answer, so the repeat is let pass (the process then ends with 0, as a server stopped so does)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        server.run(sockets=[listening])
    finally:
        listening.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except (OSError, OverflowError) as err:
        listening.close()
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise TextnnError(f"--host {host} --port {port}: cannot listen there ({reason}); choose another port "
                          f"(--port 0: a free one)") from None
    listening.listen(2048)
    return listening


class _Server(uvicorn.Server):
    """uvicorn's server, which on SIGTERM or Ctrl-C also ends the runs' waiting for fuller batches."""

    def __init__(self, config: uvicorn.Config, service: Service, grace: float):
        super().__init__(config)
        self.service, self.grace = service, grace

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            print(f"textnn serve: stopping: no new connections; answering the requests in flight (at most "
                  f"{self.grace:g} s)", file=sys.stderr, flush=True)
            # from a thread of its own: a signal handler must not wait on a lock its thread may hold
            threading.Thread(target=self.service.drain, daemon=True).start()
        super().handle_exit(sig, frame)
