"""What `GET /metrics` shows, in Prometheus' text exposition format (version 0.0.4), written here by hand.

    textnn_requests_total{endpoint, status}      counter: requests answered
    textnn_request_seconds{endpoint}             histogram: time from the request to the end of its answer
    textnn_batch_size{run}                       histogram: items computed in one forward pass
    textnn_queue_depth{run}                      gauge: requests waiting for their run's thread
    textnn_refusals_total{reason}                counter: requests refused (queue_full, too_large, invalid,
                                                 stopping)
    textnn_dropped_total{run}                    counter: requests whose client went away first: taken out of
                                                 the queue, or a streamed generation stopped

`endpoint` is the route (`/v1/runs/{name}/predict`), never the path a client sent, so that made-up paths
cannot grow the label sets without end.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Callable

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROUTES = ("/health", "/metrics", "/v1/runs", "/v1/models", "/v1/completions", "/")
RUN_ROUTES = ("predict", "translate", "generate")


def route(path: str) -> str:
    """The route a request path is counted under: itself for a fixed one, `/v1/runs/{name}/X`, or "other"."""
    if path in ROUTES:
        return path
    parts = path.strip("/").split("/")
    if len(parts) == 4 and parts[:2] == ["v1", "runs"] and parts[3] in RUN_ROUTES:
        return f"/v1/runs/{{name}}/{parts[3]}"
    return "other"


class Histogram:
    def __init__(self, buckets: tuple):
        self.buckets = buckets
        self.counts = [0] * len(buckets)  # observations <= each bound (not cumulative; summed when written)
        self.sum, self.count = 0.0, 0

    def observe(self, value: float) -> None:
        for at, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[at] += 1
                break
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: dict) -> list[str]:
        lines, total = [], 0
        for bound, count in zip(self.buckets, self.counts):
            total += count
            lines.append(f"{name}_bucket{_labels({**labels, 'le': _number(bound)})} {total}")
        lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {self.count}")
        lines.append(f"{name}_sum{_labels(labels)} {_number(self.sum)}")
        lines.append(f"{name}_count{_labels(labels)} {self.count}")
        return lines


class Metrics:
    """The server's counters, updated from the event loop and the runs' threads alike (under one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter = Counter()  # (endpoint, status) -> count
        self.latency: dict[str, Histogram] = {}
        self.batches: dict[str, Histogram] = {}
        self.refusals: Counter = Counter()
        self.dropped: Counter = Counter()  # run -> requests dropped when their client went away
        self.depths: dict[str, Callable[[], int]] = {}  # run -> its queue depth, read when written

    def watch_queue(self, run: str, depth: Callable[[], int]) -> None:
        self.depths[run] = depth
        self.batches[run] = Histogram(BATCH_BUCKETS)

    def request(self, path: str, status: int, seconds: float) -> None:
        endpoint = route(path)
        with self.lock:
            self.requests[endpoint, status] += 1
            self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(self, run: str, size: int) -> None:
        with self.lock:
            self.batches[run].observe(size)

    def drop(self, run: str) -> None:
        with self.lock:
            self.dropped[run] += 1

    def refused(self, reason: str) -> None:
        with self.lock:
            self.refusals[reason] += 1

    def text(self) -> str:
        with self.lock:
            lines = _family("textnn_requests_total", "counter", "HTTP requests answered, by route and status code")
            lines += [f"textnn_requests_total{_labels({'endpoint': endpoint, 'status': str(status)})} {count}"
                      for (endpoint, status), count in sorted(self.requests.items())]
            lines += _family("textnn_request_seconds", "histogram", "seconds from a request to the end of its answer")
            for endpoint, histogram in sorted(self.latency.items()):
                lines += histogram.lines("textnn_request_seconds", {"endpoint": endpoint})
            lines += _family("textnn_batch_size", "histogram", "items computed in one forward pass, by run")
            for run, histogram in sorted(self.batches.items()):
                lines += histogram.lines("textnn_batch_size", {"run": run})
            lines += _family("textnn_queue_depth", "gauge", "requests waiting for their run's thread")
            lines += [f"textnn_queue_depth{_labels({'run': run})} {depth()}" for run, depth in sorted(self.depths.items())]
            lines += _family("textnn_refusals_total", "counter", "requests refused, by reason")
            lines += [f"textnn_refusals_total{_labels({'reason': reason})} {count}"
                      for reason, count in sorted(self.refusals.items())]
            lines += _family("textnn_dropped_total", "counter", "requests whose client went away before their answer")
            lines += [f"textnn_dropped_total{_labels({'run': run})} {self.dropped[run]}" for run in sorted(self.depths)]
        return "\n".join(lines) + "\n"


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _labels(labels: dict) -> str:
    """{a="x",b="y"}, each value escaped as the format says (backslash, double quote, line feed)."""
    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "{" + ",".join(f'{key}="{escaped(value)}"' for key, value in labels.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value))  # 0.005, 1.0, 32.0: as Prometheus' own clients write bounds and sums
