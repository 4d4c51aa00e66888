"""Span QA through `textnn serve`: a tiny BERT run trained a few steps on a small SQuAD-like file is served
on a free port, and its answers to JSON objects {"question", "context"} are those `textnn predict RUN FILE`
prints for the same lines (one context long enough to be read in several windows); an object without its
context is refused with 422 naming the input."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_bert_tasks_cli import TRAIN, squad_fixture
from tests.e2e.test_serve import Server, Workspace, lines_of, same

QA_CONFIG = ("task: qa\ndata: {train: squad.json, max_length: 48, doc_stride: 16, max_query_length: 12, "
             "wordpiece_vocab_size: 150}\nmodel: {name: bert, preset: tiny}\n" + TRAIN + "\n")
WINDOW = 48  # data.max_length above: tokens per window, question and markers included


@pytest.fixture(scope="module")
def qa(tmp_path_factory):
    """The workspace, the trained run's directory and the fixture's contexts."""
    ws = Workspace(tmp_path_factory.mktemp("serve-qa"))
    data = squad_fixture(ws.root / "squad.json", articles=3, seed=1)
    (ws.root / "qa.yaml").write_text(QA_CONFIG, encoding="utf-8")
    ws.output("train", "qa.yaml", "--run-dir", "runs/qa")
    return ws, "runs/qa", [paragraph["context"] for article in data for paragraph in article["paragraphs"]]


def test_qa_answers_what_textnn_predict_prints_and_a_missing_context_is_422(qa):
    ws, run, contexts = qa
    long_context = " ".join(contexts[:3])  # more words than one window holds tokens: read in several windows
    assert len(long_context.split()) > 2 * WINDOW
    questions = [{"question": "Where was the treaty signed?", "context": contexts[3]},
                 {"question": "When was the treaty signed?", "context": long_context},
                 {"question": "Where was the treaty signed?", "context": "The treaty was signed in Oslo in 1905."}]
    (ws.root / "input.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    printed = lines_of(ws.output("predict", run, "input.jsonl"))
    assert len(printed) == len(questions)

    serving = Server(ws, [run], "--max-batch", "4")
    try:
        served = serving.post("/v1/runs/qa/predict", {"inputs": questions})["predictions"]
        assert len(served) == len(questions)
        for ours, theirs, asked in zip(served, printed, questions):
            assert ours.keys() == theirs.keys() == {"question", "answer", "start", "score"}, (ours, theirs)
            for key in ours:
                assert same(ours[key], theirs[key]), (key, ours, theirs)
            assert ours["question"] == asked["question"] and ours["answer"], ours
            assert asked["context"][ours["start"]:ours["start"] + len(ours["answer"])] == ours["answer"], ours

        error = serving.post("/v1/runs/qa/predict", {"inputs": [questions[0], {"question": "Where?"}]},
                             status=422)["error"]
        assert error["param"] == "inputs[1]" and error["message"].startswith("inputs[1]: "), error
        assert '"context"' in error["message"] and "missing" in error["message"], error
    finally:
        assert serving.stop() == 0, serving.errors()
    assert "Traceback" not in serving.errors()
