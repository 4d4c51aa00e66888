"""A run is loaded with the tokenizer its task saved, and refused with one from elsewhere.

A tagger with data.lowercase lower-cases its word lookup only and saves a word tokenizer that keeps
the case (its characters and casing feature read the token as written); every other run, and a tagger
reading WordPiece, saves the tokenizer its data options name.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.experiment import load_run, train
from textnn.front import evaluate_run, predict_run, read_examples
from textnn.registry import task_class
from textnn.resolve import config_from_dict

TRAIN = """\
Peter NNP I-NP I-PER
visited VBD I-VP O
Oslo NNP I-NP I-LOC
. . O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O
"""
DEV = """\
Peter NNP I-NP I-PER
visited VBD I-VP O
Oslo NNP I-NP I-LOC
. . O O
"""


def tagging_run(tmp_path: Path, model: dict | None = None, **data) -> Path:
    (tmp_path / "train.conll").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "dev.conll").write_text(DEV, encoding="utf-8")
    raw = {"task": "tagging",
           "data": {"format": "conll", "train": str(tmp_path / "train.conll"), "dev": str(tmp_path / "dev.conll"),
                    "tag_scheme": "iob1", **data},
           "model": model or {"name": "rnn_tagger", "preset": "tiny"},
           "train": {"max_steps": 2, "batch_size": 2, "threads": 1, "progress": False, "bootstrap_samples": 0}}
    run, _ = train(config_from_dict(raw, "test"), tmp_path / "run")
    return run.path


def test_a_lower_casing_tagger_run_is_used_after_training(tmp_path):
    run = tagging_run(tmp_path, lowercase=True)
    metrics = evaluate_run(run, str(tmp_path / "dev.conll"), bootstrap_samples=0)
    assert math.isfinite(metrics["span_f1"])
    answers = [json.loads(line) for line in predict_run(run, ["PETER Visited oslo ."])]
    assert answers[0]["tokens"] == ["PETER", "Visited", "oslo", "."]  # split in the original case

    _, task, model = load_run(run)
    assert not task.tokenizer.lowercase
    looked_up = []
    encode = task.encode
    task.encode = lambda sentences: looked_up.append(encode(sentences)) or looked_up[-1]
    task.predict(model, list(read_examples(task, ["PETER Visited oslo ."], "<test>")), task.Options())
    words = ["peter", "visited", "oslo", "."]
    assert all(word in task.vocab.stoi for word in words)  # known lower-cased, unknown as written
    assert looked_up[0].words[0].tolist() == [task.vocab.stoi[word] for word in words]


def test_an_edited_config_is_still_refused(tmp_path):
    run = tagging_run(tmp_path, lowercase=True)
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    config["data"]["tokenizer"] = "whitespace"
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(TextnnError, match="do not belong together"):
        load_run(run)


def save_tokenizer(path: Path, tokenizer: Tokenizer) -> Path:
    path.mkdir()
    (path / "tokenizer.json").write_text(json.dumps(tokenizer.to_dict()), encoding="utf-8")
    Vocab(["<pad>", "<unk>", "a"]).save(path / "vocab.json")
    return path


@pytest.mark.parametrize("task, saved, data, accepted", [
    ("tagging", ("word", False), {"lowercase": True}, True),
    ("tagging", ("word", True), {"lowercase": True}, False),
    ("tagging", ("word", False), {"lowercase": True, "tokenizer": "whitespace"}, False),
    ("tagging", ("wordpiece", True), {"lowercase": True, "tokenizer": "wordpiece"}, True),
    ("tagging", ("wordpiece", False), {"lowercase": True, "tokenizer": "wordpiece"}, False),
    ("classification", ("word", True), {"lowercase": True}, True),
    ("classification", ("word", False), {"lowercase": True}, False),
])
def test_the_loader_expects_what_the_task_saves(tmp_path, task, saved, data, accepted):
    kind, lowercase = saved
    if kind == "wordpiece":
        tokenizer = Tokenizer.train_wordpiece(["a b c"], 50, lowercase)
    else:
        tokenizer = Tokenizer(kind, lowercase)
    run = save_tokenizer(tmp_path / "run", tokenizer)
    cls = task_class(task)
    options = cls.data_config(train="t", **({"format": "conll"} if task == "tagging" else {}), **data)
    if accepted:
        assert cls.load_text_pipeline(run, options)[0].to_dict() == tokenizer.to_dict()
    else:
        with pytest.raises(TextnnError, match="do not belong together"):
            cls.load_text_pipeline(run, options)


def test_a_tagger_started_from_a_lower_casing_language_model_keeps_the_case(tmp_path):
    """Its word lookup is the language model's (lower-cased); its raw text is split as written, as its
    characters and casing feature were trained on."""
    (tmp_path / "text.txt").write_text("Peter visited Oslo .\nEU rejects German call .\n" * 20, encoding="utf-8")
    lm = {"task": "language_modeling",
          "data": {"format": "text", "train": str(tmp_path / "text.txt"), "tokenizer": "word", "lowercase": True,
                   "bptt": 4, "holdout": 0.2},
          "model": {"name": "rnn_lm", "preset": "tiny"},
          "train": {"max_steps": 1, "batch_size": 2, "threads": 1, "progress": False, "bootstrap_samples": 0}}
    train(config_from_dict(lm, "test"), tmp_path / "lm")
    (tmp_path / "tagger").mkdir()
    run = tagging_run(tmp_path / "tagger", model={"init_from": str(tmp_path / "lm")})
    _, task, _ = load_run(run)
    assert (task.tokenizer.kind, task.tokenizer.lowercase) == ("word", False)
    assert task.config.data.lowercase
    answers = [json.loads(line) for line in predict_run(run, ["PETER Visited oslo ."])]
    assert answers[0]["tokens"] == ["PETER", "Visited", "oslo", "."]
