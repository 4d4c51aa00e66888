"""`textnn serve` through real HTTP on 127.0.0.1, as a user (or a program) calls it.

Tiny runs of each kind (a classifier, a pair classifier, a tagger, a translator, a language model) are
trained by the real CLI; `python -m textnn serve` runs as a subprocess on a free port (--port 0, the port
read from its start-up line); requests go through http.client. Every answer is compared with what the
matching command (`textnn predict`, `translate`, `generate`) prints for the same input. Servers are
started once per configuration: one serving every run, one whose batches only fill up (batching, then
SIGTERM with requests in flight), one with a queue of one (429, a client that leaves).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_generate_cli import write_text
from tests.e2e.test_tagging_cli import write_toy_ner
from tests.e2e.test_translation_cli import write_corpus
from textnn import limits

pytest.importorskip("fastapi", reason="textnn serve needs the extra textnn[serve] (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="textnn serve needs the extra textnn[serve] (fastapi, uvicorn)")

REPO = Path(__file__).resolve().parents[2]
TRAIN = "train: {threads: 1, progress: false, bootstrap_samples: 0, device: cpu, batch_size: 16, epochs: 1}\n"
CONFIGS = {
    "cls": "task: classification\ndata: {train: train.tsv, dev: dev.tsv}\nmodel: {name: cbow, preset: tiny}\n",
    "pair": "task: classification\ndata: {train: pair_train.tsv, dev: pair_dev.tsv, text_pair_column: sentence2}\n"
            "model: {name: cbow, preset: tiny}\n",
    "ner": "task: tagging\ndata: {format: conll, train: ner_train.conll, dev: ner_dev.conll, tag_scheme: iob1}\n"
           "model: {name: rnn_tagger, preset: tiny}\n",
    "mt": "task: translation\ndata: {format: parallel, train: mt_train, dev: mt_dev, source: de, target: en, "
          "bpe_vocab_size: 200}\nmodel: {name: seq2seq, preset: tiny}\n",
    "lm": "task: language_modeling\ndata: {format: text, train: lm_train.txt, dev: lm_dev.txt, tokenizer: char, "
          "bptt: 16}\nmodel: {name: gpt, preset: tiny}\n",
}
# README's runs (its "Serve" section) and the tiny runs of the same kinds here
README_RUNS = {"sst2_cnn_rand": "cls", "multi30k_transformer": "mt", "tinyshakespeare_gpt": "lm"}
WAIT_FOREVER = ["--max-wait-ms", "600000"]  # a batch goes only once full (or the server is told to stop)
TIMEOUT = 120  # seconds any one request or command may take


# ------------------------------------------------------------------------------------------------ helpers

class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
                    "TEXTNN_CACHE": str(root / "cache"), "PYTHONUNBUFFERED": "1"}

    def cli(self, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=self.root, env=self.env,
                              input=stdin, capture_output=True, text=True, timeout=300)

    def output(self, *args, stdin: str | None = None) -> str:
        done = self.cli(*args, stdin=stdin)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout


class Server:
    """`textnn serve RUNS --port 0 OPTIONS` as a subprocess, its port read from the line it says at start."""

    def __init__(self, ws: Workspace, runs: list[str], *options: str):
        self.log = ws.root / f"serve-{time.monotonic_ns()}.log"
        with open(self.log, "w") as errors:
            self.proc = subprocess.Popen([sys.executable, "-m", "textnn", "serve", *runs, "--port", "0", *options],
                                         cwd=ws.root, env=ws.env, stdout=subprocess.PIPE, stderr=errors, text=True)
        self.started = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", self.started)
        assert found, f"no start-up line: {self.started!r}\n{self.errors()}"
        self.port = int(found.group(1))

    def errors(self) -> str:
        return self.log.read_text(encoding="utf-8")[-3000:]

    def request(self, method: str, path: str, body: object = None) -> tuple[int, dict, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode("utf-8")
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def post(self, path: str, body: object, status: int = 200) -> dict:
        got, _, data = self.request("POST", path, body)
        assert got == status, (got, data[:2000], self.errors())
        return json.loads(data)

    def get(self, path: str) -> bytes:
        got, _, data = self.request("GET", path)
        assert got == 200, (got, data[:2000])
        return data

    def events(self, path: str, body: dict) -> list:
        """The data of each server-sent event of a streamed answer, as they came ("[DONE]" kept as a string)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            connection.request("POST", path, body=json.dumps(body).encode("utf-8"))
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
            found = []
            for line in response:
                line = line.decode("utf-8").rstrip("\n")
                if line.startswith("data: "):
                    found.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
            return found
        finally:
            connection.close()

    def metric(self, name: str, **labels) -> float:
        """The value of one sample of /metrics (0 when it has not been counted yet)."""
        wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
        for line in self.get("/metrics").decode("utf-8").splitlines():
            if line.startswith(f"{name}{{{wanted}}} ") or (not labels and line.startswith(f"{name} ")):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def until(self, name: str, value: float, **labels) -> None:
        """Wait, polling /metrics, until its sample `name` holds `value` (a bound of TIMEOUT seconds only
        keeps a failure from hanging)."""
        deadline = time.monotonic() + TIMEOUT
        while (found := self.metric(name, **labels)) != value:
            assert self.proc.poll() is None and time.monotonic() < deadline, (name, labels, found, self.errors())
            time.sleep(0.05)

    def until_queued(self, run: str, depth: int) -> None:
        self.until("textnn_queue_depth", depth, run=run)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=TIMEOUT)


def same(ours, printed) -> bool:
    """Whether a served answer equals a printed one: floats to the last printed digit (a batch of other
    inputs, or another process, may change the last bits of a float32 sum), the rest exactly."""
    if isinstance(ours, float) or isinstance(printed, float):
        return isinstance(ours, (int, float)) and ours == pytest.approx(printed, abs=2e-6)
    if isinstance(ours, dict) and isinstance(printed, dict):
        return ours.keys() == printed.keys() and all(same(ours[key], printed[key]) for key in ours)
    if isinstance(ours, list) and isinstance(printed, list):
        return len(ours) == len(printed) and all(map(same, ours, printed))
    return ours == printed


def lines_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


# ------------------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def runs(ws) -> dict[str, str]:
    """A tiny trained run of each kind, by name (the run directory runs/NAME)."""
    root = ws.root
    write_sentiment_tsv(root / "train.tsv", 120, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 30, seed=2)
    write_sentiment_tsv(root / "pair_train.tsv", 120, seed=3, pair=True)
    write_sentiment_tsv(root / "pair_dev.tsv", 30, seed=4, pair=True)
    write_toy_ner(root / "ner_train.conll", 60, seed=1)
    write_toy_ner(root / "ner_dev.conll", 20, seed=2)
    write_corpus(root, "mt_train", 150, seed=1)
    write_corpus(root, "mt_dev", 20, seed=2)
    write_text(root / "lm_train.txt", 150, seed=1)
    with open(root / "lm_train.txt", "a", encoding="utf-8") as text:  # README's prompt is made of known characters
        text.write("ROMEO: the cat sat.\n" * 5)
    write_text(root / "lm_dev.txt", 30, seed=2)
    done = {}
    for name, config in CONFIGS.items():
        (root / f"{name}.yaml").write_text(config + TRAIN, encoding="utf-8")
        ws.output("train", f"{name}.yaml", "--run-dir", f"runs/{name}", "train.max_steps=25")
        done[name] = f"runs/{name}"
    return done


@pytest.fixture(scope="module")
def server(ws, runs):
    """One server for every run, each request computed alone (--max-batch 1)."""
    serving = Server(ws, list(runs.values()), "--max-batch", "1")
    yield serving
    assert serving.stop() == 0, serving.errors()


# ------------------------------------------------------------------------------------------------ the answers

def test_the_server_says_its_url_lists_its_runs_and_is_healthy(server):
    assert server.started.startswith("textnn serve: http://127.0.0.1:")  # this machine only, unless --host
    assert json.loads(server.get("/health")) == {"status": "ok", "runs": ["cls", "pair", "ner", "mt", "lm"]}
    listed = {run["name"]: run for run in json.loads(server.get("/v1/runs"))["runs"]}
    assert {name: (run["task"], run["family"]) for name, run in listed.items()} == {
        "cls": ("classification", "cbow"), "pair": ("classification", "cbow"), "ner": ("tagging", "rnn_tagger"),
        "mt": ("translation", "seq2seq"), "lm": ("language_modeling", "gpt")}
    assert listed["cls"]["endpoints"] == ["/v1/runs/cls/predict"]
    assert listed["mt"]["endpoints"] == ["/v1/runs/mt/translate"]
    assert listed["lm"]["endpoints"] == ["/v1/runs/lm/generate", "/v1/completions"]
    assert json.loads(server.get("/v1/models"))["data"][0]["id"] == "lm"


def test_predict_answers_what_textnn_predict_prints(ws, runs, server):
    cases = {
        "cls": ["good great film", "", "awful dull plot and the movie"],
        "pair": ["good lovely\tthe movie", "dull bad\tplot quite"],
        "ner": ["John Smith visited Paris on monday .", "", "shares of Reuters fell ."],
    }
    for name, texts in cases.items():
        printed = lines_of(ws.output("predict", runs[name], stdin="\n".join(texts) + "\n"))
        served = server.post(f"/v1/runs/{name}/predict", {"inputs": texts})["predictions"]
        assert same(served, printed), (name, served, printed)
        assert len(served) == len(texts) and (name == "pair" or served[1]["empty"] is True)
    # objects, as in JSON-lines input: a tagger's own tokens with their gold tags, a pair by its fields
    objects = [{"tokens": ["Mary", "met", "Anna", "Novak", "."], "tags": ["I-PER", "O", "I-PER", "I-PER", "O"]}]
    printed = lines_of(ws.output("predict", runs["ner"], stdin="".join(json.dumps(o) + "\n" for o in objects)))
    served = server.post("/v1/runs/ner/predict", {"inputs": objects})["predictions"]
    assert same(served, printed) and served[0]["gold"] == objects[0]["tags"]
    pair = server.post("/v1/runs/pair/predict", {"inputs": [{"text": "good lovely", "text_pair": "the movie"}]})
    assert same(pair["predictions"][0], lines_of(ws.output("predict", runs["pair"], stdin=cases["pair"][0]))[0])


def test_translate_answers_what_textnn_translate_prints_greedy_and_beam(ws, runs, server):
    sources = (ws.root / "mt_dev.de").read_text(encoding="utf-8").splitlines()[:3]
    greedy = server.post("/v1/runs/mt/translate", {"inputs": sources})["predictions"]
    assert [answer["hypotheses"][0] for answer in greedy] == \
        ws.output("translate", runs["mt"], stdin="\n".join(sources) + "\n").splitlines()
    beam = server.post("/v1/runs/mt/translate", {"inputs": sources, "beam_size": 3, "n_best": 2})["predictions"]
    printed = lines_of(ws.output("translate", runs["mt"], "--beam", 3, "--n-best", 2, stdin="\n".join(sources) + "\n"))
    assert same(beam, printed) and all(len(answer["hypotheses"]) == 2 for answer in beam)


def test_generate_answers_what_textnn_generate_prints_and_streams_the_same_text(ws, runs, server):
    printed = ws.output("generate", runs["lm"], "--prompt", "the cat", "--seed", 7, "--max-tokens", 60)
    request = {"prompt": "the cat", "seed": 7, "max_tokens": 60}
    answer = server.post("/v1/runs/lm/generate", request)
    assert answer == {"prompt": "the cat", "text": printed.removesuffix("\n"), "seed": 7}
    events = server.events("/v1/runs/lm/generate", {**request, "stream": True})
    assert len(events) > 3 and "".join(event["text"] for event in events[:-1]) == answer["text"]
    assert events[-1] == {"done": True, **answer}
    drawn = server.post("/v1/runs/lm/generate", {"prompt": "a dog", "max_tokens": 30})  # a seed drawn and said
    again = server.post("/v1/runs/lm/generate", {"prompt": "a dog", "max_tokens": 30, "seed": drawn["seed"]})
    assert again == drawn
    greedy = server.post("/v1/runs/lm/generate", {"prompt": "the", "method": "greedy", "max_tokens": 20,
                                                  "num_samples": 2})
    assert greedy["samples"][0] == greedy["samples"][1] and "seed" not in greedy


def test_openai_completions_continue_the_prompt_as_textnn_generate_does(ws, runs, server):
    printed = ws.output("generate", runs["lm"], "--prompt", "the dog", "--seed", 5, "--max-tokens", 40)
    request = {"model": "lm", "prompt": "the dog", "max_tokens": 40, "seed": 5}
    answer = server.post("/v1/completions", request)
    [choice] = answer["choices"]
    assert "the dog" + choice["text"] == printed.removesuffix("\n") and choice["finish_reason"] == "length"
    assert answer["object"] == "text_completion" and answer["usage"]["completion_tokens"] == 40
    events = server.events("/v1/completions", {**request, "stream": True})
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
    assert "".join(event["choices"][0]["text"] for event in events[:-1]) == choice["text"]
    # several prompts and samples: as `generate RUN FILE` answers its lines (line i with seed + i - 1)
    several = server.post("/v1/completions", {**request, "prompt": ["the dog", "a cat"], "n": 2})
    (ws.root / "prompts.txt").write_text("the dog\na cat\n", encoding="utf-8")
    printed = lines_of(ws.output("generate", runs["lm"], "prompts.txt", "--seed", 5, "--max-tokens", 40,
                                 "--num-samples", 2))
    assert [c["index"] for c in several["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in several["choices"]] == [sample[len(line["prompt"]):] for line in printed
                                                        for sample in line["samples"]]


def test_a_client_that_leaves_a_stream_stops_its_generation(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    connection.request("POST", "/v1/runs/lm/generate", body=json.dumps(
        {"prompt": "the cat", "max_tokens": limits.MAX_NEW_TOKENS, "stream": True}).encode("utf-8"))
    response = connection.getresponse()
    assert response.status == 200 and response.readline().startswith(b"data: ")  # the first piece: the prompt
    before = server.metric("textnn_dropped_total", run="lm")
    connection.close()  # long before its 100,000 tokens
    server.until("textnn_dropped_total", before + 1, run="lm")  # the generation saw it, and stopped
    assert server.post("/v1/runs/lm/generate", {"prompt": "a", "max_tokens": 5, "seed": 1})["text"].startswith("a")


@pytest.mark.parametrize("path, body", [
    ("/v1/runs/lm/generate", {"prompt": "the cat", "max_tokens": limits.MAX_NEW_TOKENS}),
    ("/v1/completions", {"model": "lm", "prompt": "the cat", "max_tokens": limits.MAX_NEW_TOKENS})])
def test_a_client_that_leaves_a_whole_generation_stops_it(server, path, body):
    batches = server.metric("textnn_batch_size_count", run="lm")
    dropped = server.metric("textnn_dropped_total", run="lm")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    connection.request("POST", path, body=json.dumps(body).encode("utf-8"))
    server.until("textnn_batch_size_count", batches + 1, run="lm")  # the run's thread is computing it
    connection.close()  # long before its 100,000 tokens
    server.until("textnn_dropped_total", dropped + 1, run="lm")  # the generation saw it, and stopped
    assert server.post("/v1/runs/lm/generate", {"prompt": "a", "max_tokens": 5, "seed": 1})["text"].startswith("a")
    assert server.metric("textnn_batch_size_count", run="lm") == batches + 2  # the next request was computed


def test_without_fastapi_serve_says_how_to_install_it(ws, runs):
    code = ("import sys; sys.modules['fastapi'] = None; from textnn.cli import main; "
            f"sys.exit(main(['serve', {runs['cls']!r}]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ws.root, env=ws.env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 2 and done.stderr.startswith("error: textnn serve needs fastapi"), done.stderr
    assert "pip install 'textnn[serve]'" in done.stderr and len(done.stderr.splitlines()) == 1


def test_max_batch_one_computes_each_request_alone(server):
    before = [server.metric(f"textnn_batch_size_{what}", run="cls") for what in ("count", "sum")]
    threads = [threading.Thread(target=server.post, args=("/v1/runs/cls/predict", {"inputs": ["good film"]}))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = [server.metric(f"textnn_batch_size_{what}", run="cls") for what in ("count", "sum")]
    assert [now - then for now, then in zip(after, before)] == [4, 4]  # four batches of one input


# ------------------------------------------------------------------------------------------------ refusals

def test_bad_requests_are_422_naming_the_field(server):
    cases = [(b'{"inputs": [', "body"), ({"input": ["x"]}, "input"), ({"inputs": "x"}, "inputs"),
             ({"inputs": ["ok", 3]}, "inputs[1]"), ({"inputs": ["two\nlines"]}, "inputs[0]"),
             ({"inputs": []}, "inputs")]
    for body, field in cases:
        error = server.post("/v1/runs/cls/predict", body, status=422)["error"]
        assert error["param"] == field and error["message"].startswith(field), error
    error = server.post("/v1/runs/pair/predict", {"inputs": ["no second sentence"]}, status=422)["error"]
    assert error["param"] == "inputs[0]" and "sentence pairs" in error["message"]
    assert server.post("/v1/runs/lm/generate", {"temperature": -1}, status=422)["error"]["param"] == "temperature"
    assert server.post("/v1/completions", {"model": "lm", "echo": True}, status=422)["error"]["param"] == "echo"
    assert server.post("/v1/runs/lm/predict", {"inputs": ["x"]}, status=400)["error"]["message"].endswith(
        "use /v1/runs/lm/generate or /v1/completions")
    assert server.post("/v1/runs/nope/predict", {"inputs": ["x"]}, status=404)["error"]["message"].startswith(
        "no run named 'nope'")
    assert server.metric("textnn_refusals_total", reason="invalid") >= len(cases) + 4


def test_inputs_past_the_size_policy_are_413_with_the_reason(server):
    error = server.post("/v1/runs/lm/generate", {"max_tokens": limits.MAX_NEW_TOKENS + 1}, status=413)["error"]
    assert error["param"] == "max_tokens" and f"{limits.MAX_NEW_TOKENS:,}" in error["message"]
    error = server.post("/v1/runs/mt/translate", {"inputs": ["ein hund"], "beam_size": limits.MAX_BEAM + 1},
                        status=413)["error"]
    assert error["param"] == "beam_size"
    # a sentence longer than a tagger reads whole: refused inside the forward pass, and only that request
    long = {"tokens": ["word"] * (limits.MAX_EXAMPLE_TOKENS + 1)}
    error = server.post("/v1/runs/ner/predict", {"inputs": ["fine .", long]}, status=413)["error"]
    assert error["param"] == "inputs[1]" and f"{limits.MAX_EXAMPLE_TOKENS:,}" in error["message"]
    # a body larger than the limit of one line is refused on its Content-Length, before it is read
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    connection.putrequest("POST", "/v1/runs/cls/predict")
    connection.putheader("Content-Length", str(limits.MAX_LINE_BYTES + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["param"] == "body"
    connection.close()
    assert server.metric("textnn_refusals_total", reason="too_large") >= 4


# ------------------------------------------------------------------------------------------------ batching

def test_concurrent_requests_share_a_batch_and_sigterm_loses_none_in_flight(ws, runs):
    serving = Server(ws, [runs["cls"]], "--max-batch", "4", *WAIT_FOREVER)
    texts = ["good great film", "awful dull plot", "lovely superb", "the movie was bad"]
    printed = lines_of(ws.output("predict", runs["cls"], stdin="\n".join(texts) + "\n"))
    answers: dict[int, object] = {}

    def ask(number: int, text: str) -> None:
        answers[number] = serving.post("/v1/runs/cls/predict", {"inputs": [text]})["predictions"][0]

    threads = [threading.Thread(target=ask, args=item) for item in enumerate(texts)]
    for thread in threads:  # a batch goes only once four inputs wait: all four requests share it
        thread.start()
    for thread in threads:
        thread.join()
    assert same([answers[number] for number in range(4)], printed)
    assert serving.metric("textnn_batch_size_count", run="cls") == 1
    assert serving.metric("textnn_batch_size_sum", run="cls") == 4

    # two requests wait for a batch that will not fill; SIGTERM answers them, then the server exits with 0
    threads = [threading.Thread(target=ask, args=(number, texts[number])) for number in range(2)]
    answers.clear()
    for thread in threads:
        thread.start()
    serving.until_queued("cls", 2)
    assert serving.stop() == 0, serving.errors()
    for thread in threads:
        thread.join()
    assert same([answers[0], answers[1]], printed[:2])
    assert "stopping" in serving.errors() and "Traceback" not in serving.errors()
    with pytest.raises(OSError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", serving.port), timeout=5).close()


@pytest.fixture(scope="module")
def lstm(ws, runs) -> str:
    """A tiny word-level LSTM language model run, on the language model's text."""
    (ws.root / "lstm.yaml").write_text(
        "task: language_modeling\ndata: {format: text, train: lm_train.txt, dev: lm_dev.txt, tokenizer: whitespace, "
        "bptt: 16}\nmodel: {name: rnn_lm, preset: tiny}\n" + TRAIN, encoding="utf-8")
    ws.output("train", "lstm.yaml", "--run-dir", "runs/lstm", "train.max_steps=25")
    return "runs/lstm"


@pytest.mark.parametrize("name, prompts", [("lm", ["the cat", "a dog s", "the mat", "ran on "]),
                                           ("lstm", ["the cat", "a dog", "sat on", "the mat"])])
def test_concurrent_generations_are_decoded_together_and_answer_as_each_alone(ws, runs, lstm, name, prompts):
    """Four generations of prompts of one length and one decoding but their seeds share one batch (a batch
    goes only once four wait); each answers what `textnn generate --prompt` prints for it alone, and so does
    a completion of the four prompts, as `textnn generate RUN FILE` prints its lines."""
    run = lstm if name == "lstm" else runs[name]
    alone = [ws.output("generate", run, "--prompt", prompt, "--seed", 11 + number, "--max-tokens", 30)
             for number, prompt in enumerate(prompts)]
    (ws.root / f"{name}-prompts.txt").write_text("".join(prompt + "\n" for prompt in prompts), encoding="utf-8")
    printed = lines_of(ws.output("generate", run, f"{name}-prompts.txt", "--seed", 11, "--max-tokens", 30))
    assert [line["text"] for line in printed] == [text.removesuffix("\n") for text in alone]
    serving = Server(ws, [run], "--max-batch", "4", *WAIT_FOREVER)
    try:
        answers: dict[int, dict] = {}

        def ask(number: int) -> None:
            body = {"prompt": prompts[number], "seed": 11 + number, "max_tokens": 30}
            answers[number] = serving.post(f"/v1/runs/{name}/generate", body)

        threads = [threading.Thread(target=ask, args=(number,)) for number in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [answers[number]["text"] for number in range(4)] == [line["text"] for line in printed]
        assert len({line["text"] for line in printed}) == 4
        assert serving.metric("textnn_batch_size_count", run=name) == 1  # the four in one batch
        assert serving.metric("textnn_batch_size_sum", run=name) == 4
        # completions of several prompts are one request's batch: as `generate RUN FILE` prints them
        several = serving.post("/v1/completions", {"model": name, "prompt": prompts, "max_tokens": 30, "seed": 11})
        assert [prompt + choice["text"] for prompt, choice in zip(prompts, several["choices"])] == \
            [line["text"] for line in printed]
        assert serving.metric("textnn_batch_size_count", run=name) == 2
        assert serving.metric("textnn_batch_size_bucket", run=name, le="4.0") == 2
        assert serving.metric("textnn_batch_size_bucket", run=name, le="2.0") == 0
    finally:
        assert serving.stop() == 0, serving.errors()


def test_a_full_queue_is_429_and_a_client_that_leaves_frees_its_place(ws, runs):
    serving = Server(ws, [runs["cls"]], "--max-batch", "4", "--queue", "1", *WAIT_FOREVER)
    try:
        leaving = http.client.HTTPConnection("127.0.0.1", serving.port, timeout=TIMEOUT)
        leaving.request("POST", "/v1/runs/cls/predict", body=json.dumps({"inputs": ["good film"]}))
        serving.until_queued("cls", 1)
        status, headers, data = serving.request("POST", "/v1/runs/cls/predict", {"inputs": ["bad film"]})
        assert status == 429 and headers.get("retry-after", headers.get("Retry-After")) == "1", (status, data)
        assert json.loads(data)["error"]["type"] == "queue_full"
        leaving.close()  # the waiting client goes away: its place in the queue is freed
        serving.until_queued("cls", 0)
        full = serving.post("/v1/runs/cls/predict", {"inputs": ["good", "bad", "fine", "dull"]})  # a full batch
        assert [answer["text"] for answer in full["predictions"]] == ["good", "bad", "fine", "dull"]
        assert serving.metric("textnn_refusals_total", reason="queue_full") == 1
        assert serving.metric("textnn_batch_size_count", run="cls") == 1  # the request that left was not computed
        assert serving.metric("textnn_dropped_total", run="cls") == 1
    finally:
        assert serving.stop() == 0, serving.errors()


# ------------------------------------------------------------------------------------------------ at start

def test_a_damaged_run_or_one_still_training_is_refused_at_start_in_one_line(ws, runs):
    damaged = ws.root / "runs" / "damaged"
    shutil.copytree(ws.root / runs["cls"], damaged)
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    training = ws.root / "runs" / "training"
    shutil.copytree(ws.root / runs["cls"], training)
    status = json.loads((training / "run.json").read_text(encoding="utf-8"))
    status.update(status="running", pid=os.getpid(), host=socket.gethostname(), heartbeat=time.time())
    (training / "run.json").write_text(json.dumps(status), encoding="utf-8")
    for run, expected in ((damaged, "model.safetensors"), (training, "still training")):
        done = ws.cli("serve", runs["lm"], run, "--port", "0")
        assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr[-2000:])
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert expected in done.stderr and str(run.name) in done.stderr


# ------------------------------------------------------------------------------------------------ README

def readme_serve_lines() -> list[str]:
    """The lines of the bash blocks of README's "Serve" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Serve\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line.split("   #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_serves_its_runs_and_its_curl_requests_answer(server):
    """README's `textnn serve` names the runs its curl lines call; each curl line, sent to the server here (its
    runs the tiny ones of the same kinds), answers what README says of it."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    lines = readme_serve_lines()
    [command] = [line for line in lines if line.startswith("textnn serve ")]
    assert {Path(word).name for word in shlex.split(command)[2:]} == set(README_RUNS)
    requests = [line for line in lines if line.startswith("curl ")]
    assert len(requests) >= 6
    for line in requests:
        here = line.replace("localhost:8000", f"127.0.0.1:{server.port}")
        for name, ours in README_RUNS.items():
            here = here.replace(name, ours)
        done = subprocess.run(["bash", "-c", here], capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0 and done.stdout, (line, done.stderr)
        words = shlex.split(line)
        asked = json.loads(words[words.index("-d") + 1]) if "-d" in words else None
        if line.endswith("/metrics"):
            assert "textnn_requests_total{" in done.stdout
        elif '"stream": true' in line:
            events = [json.loads(part[6:]) for part in done.stdout.split("\n\n") if part.startswith("data: ")]
            assert events[-1]["done"] and "".join(event["text"] for event in events[:-1]) == events[-1]["text"]
        elif "/predict" in line or "/translate" in line:
            predictions = json.loads(done.stdout)["predictions"]
            assert len(predictions) == len(asked["inputs"]), done.stdout
            assert all(len(p["hypotheses"]) == asked["n_best"] for p in predictions) if "/translate" in line \
                else all("label" in p for p in predictions)
        elif "/generate" in line:
            assert json.loads(done.stdout)["text"].startswith(asked["prompt"])
        elif "/completions" in line:
            assert json.loads(done.stdout)["usage"]["completion_tokens"] == asked["max_tokens"]
        else:
            assert {run["name"] for run in json.loads(done.stdout)["runs"]} >= set(README_RUNS.values())
