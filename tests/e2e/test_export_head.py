"""`textnn export` chooses the transformers class from the model's description, which the run keeps in
run.json (`model`): a tiny BERT classifier with one linear layer over its pooled vector is written as
BertForSequenceClassification, one with an MLP head (a hidden layer) as the bare BertModel; a run saved
before runs kept a description exports the same files from the loaded model's own; an edited entry is
refused with one line."""

from __future__ import annotations

import json
import random

import pytest
from safetensors import safe_open

from tests.e2e.test_streams_and_places import one_line_error, textnn
from textnn.files import read_yaml

WORDS = "the a river city music team film war king song game north old new people year first".split()
CONFIG = ("task: classification\ndata: {{format: tsv, train: {train}, dev: {train}, max_length: 16, tokenizer: wordpiece, "
          "wordpiece_vocab_size: 80}}\nmodel: {{name: bert, preset: tiny}}\nhead: {{hidden: {hidden}}}\n"
          "train: {{max_steps: 2, batch_size: 8, progress: false, bootstrap_samples: 0, threads: 1}}\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny BERT classifier runs: head.hidden 0 (a linear head) and 6 (an MLP head)."""
    root = tmp_path_factory.mktemp("head")
    rng = random.Random(0)
    rows = "".join(f"{' '.join(rng.choice(WORDS) for _ in range(6))}\t{i % 3}\n" for i in range(24))
    (root / "train.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    trained = {}
    for hidden in (0, 6):
        (root / f"h{hidden}.yaml").write_text(CONFIG.format(train=root / "train.tsv", hidden=hidden), encoding="utf-8")
        proc = textnn("train", str(root / f"h{hidden}.yaml"), "--run-dir", str(root / f"h{hidden}"), timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        trained[hidden] = root / f"h{hidden}"
    return trained


def exported(run, out) -> tuple[dict, set[str]]:
    proc = textnn("export", str(run), str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    with safe_open(out / "model.safetensors", "pt") as weights:
        names = set(weights.keys())
    return json.loads((out / "config.json").read_text(encoding="utf-8")), names


def files(folder) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("hidden, kind, architecture", [(0, "linear classifier", "BertForSequenceClassification"),
                                                        (6, "mlp classifier", "BertModel")])
def test_the_run_describes_its_head_and_export_follows_it(runs, tmp_path, hidden, kind, architecture):
    described = json.loads((runs[hidden] / "run.json").read_text(encoding="utf-8"))["model"]
    d_model = read_yaml(runs[hidden] / "config.yaml")["model"]["d_model"]
    assert described == {"head": {"kind": kind, "in": d_model, "classes": 3, "hidden": hidden, "batch_norm": False},
                         "head_input": "sentence"}
    hf, names = exported(runs[hidden], tmp_path / "hf")
    assert hf["architectures"] == [architecture]
    assert ("classifier.weight" in names) == (architecture == "BertForSequenceClassification")
    assert all(name.startswith("bert.") for name in names - {"classifier.weight", "classifier.bias"}) \
        == (architecture == "BertForSequenceClassification")
    if architecture == "BertForSequenceClassification":
        assert hf["num_labels"] == 3


@pytest.mark.parametrize("hidden", [0, 6])
def test_a_run_saved_without_a_description_exports_the_same_files(runs, tmp_path, hidden):
    run = runs[hidden]
    exported(run, tmp_path / "described")
    status = run / "run.json"
    saved = status.read_text(encoding="utf-8")
    try:
        info = json.loads(saved)
        del info["model"]
        status.write_text(json.dumps(info), encoding="utf-8")
        exported(run, tmp_path / "derived")
    finally:
        status.write_text(saved, encoding="utf-8")
    assert files(tmp_path / "derived") == files(tmp_path / "described")


def test_an_edited_description_is_refused_with_one_line(runs, tmp_path):
    status = runs[0] / "run.json"
    saved = status.read_text(encoding="utf-8")
    try:
        status.write_text(json.dumps({**json.loads(saved), "model": {"head": "linear"}}), encoding="utf-8")
        proc = textnn("export", str(runs[0]), str(tmp_path / "hf"))
    finally:
        status.write_text(saved, encoding="utf-8")
    one_line_error(proc, str(status), "`model` entry")
    assert not (tmp_path / "hf").exists()
