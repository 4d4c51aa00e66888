"""The real CLI on a toy NER corpus: `python -m textnn train / evaluate / predict / compare` for taggers.

The corpus is CoNLL-2003-shaped (4 columns, IOB1, -DOCSTART- lines) and learnable: names come from
short lists and sit in a few sentence templates; the dev file also holds names never seen in
training, so a model has to use context, characters and casing, and its scores are not trivially 1.
Every number asserted is read back from what the commands wrote or recomputed from the fixture.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from textnn.metrics.spans import span_scores

REPO = Path(__file__).resolve().parents[2]
MODELS = ("rnn_tagger", "window_tagger")

NAMES = {
    "PER": ["John Smith", "Mary", "Peter Blackburn", "Anna Novak", "Lukas", "Sofia Garcia"],
    "LOC": ["Paris", "London", "Berlin", "New York", "Oslo"],
    "ORG": ["Reuters", "United Nations", "Acme Corp", "Bank of Spain"],
    "MISC": ["German", "French", "Olympic"],
}
UNSEEN = {"PER": ["Jan Kowalski", "Ines"], "LOC": ["Tokyo", "Lima"], "ORG": ["Tata Motors"], "MISC": ["Dutch"]}
TEMPLATES = ["{PER} visited {LOC} on monday .", "{ORG} said {PER} will travel to {LOC} .",
             "the {MISC} team beat {ORG} .", "talks between {LOC} {LOC} ended .",
             "{PER} and {PER} met in {LOC} .", "shares of {ORG} fell 3.5 percent ."]

CONFIG = """\
task: tagging
data: {{format: conll, train: {train}, dev: {dev}, tag_scheme: iob1, train_tag_scheme: bioes}}
model: {{name: {model}, preset: tiny}}
train: {{optimizer: adam, lr: 0.02, epochs: 5, batch_size: 16, threads: 1, progress: false, bootstrap_samples: 100,
         log_every: 10}}
"""


def write_toy_ner(path: Path, n: int, seed: int, unseen: float = 0.0) -> Path:
    """n sentences in IOB1 (B- only where a chunk touches one of the same type), a document every 20."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        if i % 20 == 0:
            lines += ["-DOCSTART- -X- O O", ""]
        previous = None
        for slot in rng.choice(TEMPLATES).split():
            if not slot.startswith("{"):
                lines.append(f"{slot} NN I-NP O")
                previous = None
                continue
            kind = slot[1:-1]
            pool = UNSEEN[kind] if rng.random() < unseen else NAMES[kind]
            for j, word in enumerate(rng.choice(pool).split()):
                prefix = "B" if j == 0 and previous == kind else "I"
                lines.append(f"{word} NNP I-NP {prefix}-{kind}")
            previous = kind
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_columns(text: str) -> list[list[list[str]]]:
    """Sentences of CoNLL text as lists of column lists, read without textnn: blank-line blocks minus
    -DOCSTART- ones."""
    blocks = [b for b in text.split("\n\n") if b.strip() and not b.startswith("-DOCSTART-")]
    return [[line.split() for line in b.splitlines()] for b in blocks]


def file_column(path: Path, column: int) -> list[list[str]]:
    return [[row[column] for row in sentence] for sentence in read_columns(path.read_text(encoding="utf-8"))]


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.train = write_toy_ner(root / "train.conll", 300, seed=1)
        self.dev = write_toy_ner(root / "dev.conll", 80, seed=2, unseen=0.25)
        self.env = {**os.environ, "TEXTNN_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1",
                    "PYTHONUNBUFFERED": "1"}

    def config(self, model: str, name: str = "") -> Path:
        path = self.root / f"{name or model}.yaml"
        path.write_text(CONFIG.format(train=self.train, dev=self.dev, model=model), encoding="utf-8")
        return path

    def cli(self, *args, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "textnn", *map(str, args)], cwd=self.root, env=self.env,
                              input=input, capture_output=True, text=True, timeout=600)


def needs_model(model: str) -> None:
    if model == "window_tagger" and not (REPO / "textnn" / "models" / "window_tagger.py").is_file():
        pytest.skip("textnn/models/window_tagger.py is not written yet")


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("tagging"))


@pytest.fixture(scope="module")
def runs(ws) -> dict:
    """One `textnn train` per model family (runs that cannot start are reported by the test using them)."""
    done = {}
    for model in MODELS:
        if model == "window_tagger" and not (REPO / "textnn" / "models" / "window_tagger.py").is_file():
            continue
        run_dir = ws.root / "runs" / model
        done[model] = (run_dir, ws.cli("train", ws.config(model), "--run-dir", run_dir))
    return done


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def records(run_dir: Path, split: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def dev_records(run_dir: Path) -> list[dict]:
    return records(run_dir, "dev")


# ------------------------------------------------------------------------------------------------ train


@pytest.mark.parametrize("model", MODELS)
def test_train_learns_and_writes_the_run(ws, runs, model):
    needs_model(model)
    run_dir, proc = runs[model]
    assert proc.returncode == 0, proc.stderr
    assert {"config.yaml", "model.safetensors", "vocab.json", "chars.json", "tags.json", "tokenizer.json",
            "metrics.jsonl", "report.md", "run.json"} <= {p.name for p in run_dir.iterdir()}
    state = status(run_dir)
    assert state["status"] == "finished" and state["metric"] == "span_f1"
    evaluations = dev_records(run_dir)
    assert len(evaluations) == 5  # one per epoch
    f1 = state["dev"]["span_f1"]
    assert f1 == max(r["span_f1"] for r in evaluations)  # the best checkpoint is what the run keeps
    assert f1 >= 0.5
    losses = [r["loss"] for r in records(run_dir, "train")]
    assert len(losses) >= 5 and losses[-1] < losses[0]
    assert state["dev"]["span_f1_ci_low"] <= f1 <= state["dev"]["span_f1_ci_high"]
    tags = json.loads((run_dir / "tags.json").read_text(encoding="utf-8"))
    assert tags["scheme"] == "bioes" and tags["tags"][0] == "O" and "S-LOC" in tags["tags"]
    assert f"span_f1={f1:.4f}" in proc.stdout
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "| type | precision | recall | f1 | gold | predicted | correct |" in report


# ------------------------------------------------------------------------------------------------ evaluate


def test_evaluate_prints_span_scores_and_per_type_table(ws, runs):
    run_dir, _ = runs["rnn_tagger"]
    proc = ws.cli("evaluate", run_dir, "--data", ws.dev, "--bootstrap", "100")
    assert proc.returncode == 0, proc.stderr
    values = dict(re.findall(r"^\s*(\w+): ([0-9.]+)$", proc.stdout, flags=re.M))
    recorded = status(run_dir)["dev"]
    for key in ("span_f1", "span_precision", "span_recall", "token_accuracy"):
        assert float(values[key]) == pytest.approx(recorded[key], abs=5e-5)
    assert int(values["sentences"]) == len(file_column(ws.dev, 0))
    table = proc.stdout.split("per type:\n")[1].splitlines()
    assert table[0].split() == ["type", "precision", "recall", "f1", "gold", "predicted", "correct"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert set(rows) >= {"PER", "LOC", "ORG", "MISC"}
    assert sum(int(r[4]) for r in rows.values()) == int(values["gold_spans"])
    assert sum(int(r[6]) for r in rows.values()) == int(values["correct_spans"])

    as_json = ws.cli("evaluate", run_dir, "--data", ws.dev, "--json", "--bootstrap", "100")
    assert as_json.returncode == 0, as_json.stderr
    got = json.loads(as_json.stdout)
    assert got["span_f1"] == recorded["span_f1"] and got["loss"] == pytest.approx(recorded["loss"], rel=1e-5)
    assert (got["span_f1_ci_low"], got["span_f1_ci_high"]) == (recorded["span_f1_ci_low"],
                                                               recorded["span_f1_ci_high"])


# ------------------------------------------------------------------------------------------------ predict


def test_predict_conll_output_agrees_with_evaluate(ws, runs):
    run_dir, _ = runs["rnn_tagger"]
    proc = ws.cli("predict", run_dir, ws.dev, "--output-format", "conll")
    assert proc.returncode == 0, proc.stderr
    sentences = read_columns(proc.stdout)
    gold = file_column(ws.dev, -1)
    assert [[row[1] for row in s] for s in sentences] == gold  # token, gold, predicted
    assert [[row[0] for row in s] for s in sentences] == file_column(ws.dev, 0)
    assert proc.stdout.count("-DOCSTART-") == ws.dev.read_text().count("-DOCSTART-")
    predicted = [[row[2] for row in s] for s in sentences]
    assert span_scores(gold, predicted, "iob1")["span_f1"] == pytest.approx(status(run_dir)["dev"]["span_f1"])


def test_predict_jsonl_from_conll_and_from_raw_text(ws, runs):
    run_dir, _ = runs["rnn_tagger"]
    conll_out = read_columns(ws.cli("predict", run_dir, ws.dev, "--output-format", "conll").stdout)
    proc = ws.cli("predict", run_dir, ws.dev)  # auto: the -DOCSTART- first line says CoNLL; jsonl by default
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == len(conll_out)
    for row, sentence in zip(rows, conll_out):
        assert row["tokens"] == [r[0] for r in sentence] and row["gold"] == [r[1] for r in sentence]
        assert row["tags"] == [r[2] for r in sentence]
        for span in row["spans"]:  # each span is a chunk of the predicted tags
            inside = row["tags"][span["start"]:span["end"]]
            assert all(tag.endswith("-" + span["type"]) for tag in inside)
            assert span["text"] == " ".join(row["tokens"][span["start"]:span["end"]])
        assert sum(span["end"] - span["start"] for span in row["spans"]) == sum(t != "O" for t in row["tags"])

    text = "Peter Blackburn visited London on monday.\n\nReuters said Mary will travel to Paris.\n"
    raw = ws.cli("predict", run_dir, "--input-format", "text", input=text)
    assert raw.returncode == 0, raw.stderr
    rows = [json.loads(line) for line in raw.stdout.splitlines()]
    assert rows.pop(1) == {"tokens": [], "tags": [], "spans": [], "empty": True}  # the blank line's own line
    assert [r["tokens"] for r in rows] == [["Peter", "Blackburn", "visited", "London", "on", "monday", "."],
                                           ["Reuters", "said", "Mary", "will", "travel", "to", "Paris", "."]]
    assert all("gold" not in r and len(r["tags"]) == len(r["tokens"]) for r in rows)
    # the same sentences as tokens-only CoNLL get the same tags
    tokens_only = "\n\n".join("\n".join(r["tokens"]) for r in rows) + "\n"
    again = ws.cli("predict", run_dir, "--input-format", "conll", "--output-format", "conll", input=tokens_only)
    assert again.returncode == 0, again.stderr
    assert [[row[1] for row in s] for s in read_columns(again.stdout)] == [r["tags"] for r in rows]


# ------------------------------------------------------------------------------------------------ compare


def test_compare_tabulates_both_taggers(ws, runs):
    models = [m for m in MODELS if m in runs]
    configs = [ws.config(m, f"cmp_{m}") for m in models]
    markdown = ws.root / "cmp.md"
    proc = ws.cli("compare", *configs, "--set", "train.epochs=1", "--output-dir", ws.root / "compare",
                  "--markdown", markdown)
    assert proc.returncode == 0, proc.stderr
    table = markdown.read_text(encoding="utf-8").strip().splitlines()
    assert len(table) == 2 + len(models)
    for model in models:
        run_dir = ws.root / "compare" / f"cmp_{model}"
        f1 = status(run_dir)["dev"]["span_f1"]
        rows = [line for line in table if line.startswith(f"| cmp_{model} |")]
        assert len(rows) == 1 and f"span_f1 {100 * f1:.2f}" in rows[0]
        assert len(dev_records(run_dir)) == 1  # --set train.epochs=1 reached the config


# ------------------------------------------------------------------------------------------------ bad input


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_wrong_column_count_is_reported_with_its_line(ws):
    bad = ws.root / "ragged.conll"
    lines = ws.train.read_text(encoding="utf-8").splitlines()
    lines[6] = lines[6] + " EXTRA"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_dir = ws.root / "runs" / "ragged"
    message = one_line_error(ws.cli("train", ws.config("rnn_tagger"), "--run-dir", run_dir, f"data.train={bad}"))
    assert f"{bad}:7:" in message and "expected 4" in message and "found 5" in message
    assert not run_dir.exists()


def test_unknown_tag_scheme_lists_the_valid_ones(ws):
    message = one_line_error(ws.cli("train", ws.config("rnn_tagger"), "data.tag_scheme=bilou",
                                    "--run-dir", ws.root / "runs" / "bilou"))
    assert "data.tag_scheme" in message and "'bilou'" in message and "iob1, iob2, bio, bioes" in message


def test_invalid_tag_is_reported_with_its_line(ws):
    bad = ws.root / "badtag.conll"
    lines = ws.dev.read_text(encoding="utf-8").splitlines()
    number = next(i for i, line in enumerate(lines) if line.endswith("-PER"))
    lines[number] = lines[number].rsplit(" ", 1)[0] + " X-PER"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_dir = ws.root / "runs" / "badtag"
    message = one_line_error(ws.cli("train", ws.config("rnn_tagger"), "--run-dir", run_dir, f"data.dev={bad}"))
    assert f"{bad}:{number + 1}: tag 'X-PER' is not valid" in message and "iob1" in message
    assert not run_dir.exists()
