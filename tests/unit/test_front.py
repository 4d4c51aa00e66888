"""The front layer (textnn/front.py) on tasks built from small files, their models untrained: a flag is
refused by the task it does not apply to, naming both; the same input as plain text, JSON lines or the
run's training table reads into the same examples; predictions are the task's dataclasses; and what is
printed reads back as it was predicted."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus
from textnn.errors import TextnnError
from textnn.front import answer, options_for, output_lines, predicted, read_examples
from textnn.generation.decoding import DecodingConfig
from textnn.registry import task_class
from textnn.resolve import config_from_dict
from textnn.tasks.base import NoOptions

TRAIN = {"batch_size": 4, "threads": 1, "progress": False}
CONLL = "-DOCSTART- -X- O O\n\nPeter NNP I-PER\nvisited VBD O\nOslo NNP I-LOC\n. . O\n\nEU NNP I-ORG\nrejects VBZ O\n" \
        "German JJ I-MISC\ncall NN O\n. . O\n"


def built(task: str, data: dict, model: str):
    config = config_from_dict({"task": task, "data": data, "model": {"name": model, "preset": "tiny"},
                               "train": TRAIN}, "test")
    return task_class(task).from_data(config)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("front")
    write_sentiment_tsv(root / "train.tsv", 30, seed=1)
    write_sentiment_tsv(root / "pair.tsv", 30, seed=1, pair=True)
    (root / "train.conll").write_text(CONLL, encoding="utf-8")
    prefix = write_corpus(root, "mt", 30, seed=1)
    de = (root / "mt.de").read_text(encoding="utf-8").splitlines()
    en = (root / "mt.en").read_text(encoding="utf-8").splitlines()
    (root / "mt.tsv").write_text("de\ten\n" + "".join(f"{s}\t{t}\n" for s, t in zip(de, en)), encoding="utf-8")
    return {"classification": built("classification", {"format": "tsv", "train": str(root / "train.tsv")}, "dan"),
            "pair": built("classification", {"format": "tsv", "train": str(root / "pair.tsv"),
                                             "text_pair_column": "sentence2"}, "dan"),
            "tagging": built("tagging", {"format": "conll", "train": str(root / "train.conll")},
                             "rnn_tagger"),
            "translation": built("translation", {"format": "tsv", "train": str(root / "mt.tsv"), "tokenizer": "word"},
                                 "seq2seq"),
            "parallel": built("translation", {"train": str(prefix), "tokenizer": "word"}, "seq2seq")}


def examples(task, lines: list[str], **options) -> list:
    return list(read_examples(task, [line + "\n" for line in lines], "<test>", **options))


def test_a_flag_that_does_not_apply_is_refused_naming_it_and_the_task(tasks):
    beam = DecodingConfig.from_flags(beam=2)
    for name, flags, flag in (("classification", {"input_format": "text"}, "--input-format"),
                              ("classification", {"output_format": "conll"}, "--output-format"),
                              ("classification", {"decoding": beam}, "--beam/--length-penalty"),
                              ("tagging", {"streams": 2}, "--streams"),
                              ("translation", {"input_format": "jsonl"}, "--input-format"),
                              ("translation", {"top_n": 5}, "--top-n")):
        task = tasks[name]
        with pytest.raises(TextnnError, match=f"^{flag}: does not apply to task {task.config.task}"):
            options_for(task, **flags)
    # left out (None, or 0 for a count), a flag is not given; one that applies becomes the task's option
    assert options_for(tasks["classification"], input_format=None, streams=0, decoding=None) == NoOptions()
    assert options_for(tasks["tagging"], input_format="conll", output_format="conll") == NoOptions()
    assert options_for(tasks["translation"], decoding=beam).decoding == beam


def test_the_same_input_as_text_json_lines_or_the_training_table_gives_the_same_examples(tasks):
    classifier, pair, tagger, translator = (tasks[name] for name in ("classification", "pair", "tagging", "translation"))
    texts = ["a good film", "", "awful plot"]
    plain = examples(classifier, texts)
    assert plain == [classifier.Example("a good film"), None, classifier.Example("awful plot")]
    assert plain[0].place == "<test>:1"
    for key in ("sentence", "text"):
        assert examples(classifier, [json.dumps({key: t}) if t else "" for t in texts]) == plain
    assert examples(classifier, ["sentence\tlabel", "a good film\t1", "", "awful plot\t0"]) == plain
    # the Python API's texts are texts: no header, no JSON lines
    assert examples(classifier, ["sentence\tlabel"], input_format="text", table_header=False)[0].text == "sentence\tlabel"

    pairs = examples(pair, ["a good\tfilm", "awful\tplot"])
    assert pairs == examples(pair, [json.dumps({"sentence": "a good", "sentence2": "film"}),
                                    json.dumps({"text": "awful", "text_pair": "plot"})])
    assert pairs == examples(pair, ["sentence\tsentence2\tlabel", "a good\tfilm\t1", "awful\tplot\t0"])
    with pytest.raises(TextnnError, match="<test>:2: this model classifies sentence pairs"):
        examples(pair, ["a good\tfilm", "awful plot"])

    sentences = examples(tagger, ["Peter visited Oslo .", "", "EU rejects the call ."])
    assert sentences[0] == tagger.Example(("Peter", "visited", "Oslo", ".")) and sentences[1] is None
    assert examples(tagger, [json.dumps({"tokens": ["Peter", "visited", "Oslo", "."]}), "",
                             json.dumps({"text": "EU rejects the call ."})]) == sentences
    conll = examples(tagger, ["Peter O", "visited O", "Oslo O", ". O", "", "EU O", "rejects O", "the O", "call O", ". O"])
    assert [e.tokens for e in conll] == [e.tokens for e in sentences if e is not None]

    sources = examples(translator, ["ein hund", "", "eine katze"])
    assert examples(translator, [json.dumps({key: s}) if s else "" for key, s in
                                 zip(("de", "source", "text"), ("ein hund", "", "eine katze"))]) == sources
    assert examples(translator, ["de\ten", "ein hund\ta dog", "", "eine katze\ta cat"]) == sources
    assert examples(tasks["parallel"], ["de\ten", "ein hund"])[0].source == "de\ten"  # no table to read there


def test_predictions_are_the_tasks_dataclasses_and_print_as_they_read_back(tasks):
    for name, lines in (("classification", ["a good film", "", "awful plot"]),
                        ("pair", ["a good\tfilm", "   "]),
                        ("tagging", ["Peter visited Oslo .", ""]),
                        ("translation", ["ein hund", ""])):
        task = tasks[name]
        model = task.build_model().eval()
        options = options_for(task)
        answered = list(predicted(task, model, examples(task, lines), options))
        assert [prediction is None for _, prediction in answered] == [not line.strip() for line in lines]
        for _, prediction in answered:
            assert prediction is None or isinstance(prediction, task.Prediction) and dataclasses.is_dataclass(prediction)
        printed = list(output_lines(task, answered, options))
        assert len(printed) == len(lines)
        if name == "translation":  # the best hypothesis as plain text
            assert printed == [p.translation if p else "" for _, p in answered]
            continue
        for line, (_, prediction) in zip(printed, answered):
            row = json.loads(line)
            if prediction is None:
                assert row["empty"] is True and set(row) == {*answer_keys(task), "empty"}
            else:
                assert row == json.loads(json.dumps(rounded(answer(prediction), task.printed_digits)))
                assert "text_pair" in row if name == "pair" else "text_pair" not in row

    # a tagger's output read back as its input: the same tokens, with the predicted tags as the gold
    tagger = tasks["tagging"]
    model = tagger.build_model().eval()
    answered = list(predicted(tagger, model, examples(tagger, ["Peter visited Oslo .", "EU rejects the call ."]),
                              NoOptions()))
    tags = [p.tags for _, p in answered]
    as_json = examples(tagger, list(output_lines(tagger, answered, NoOptions())))
    conll = "\n".join(output_lines(tagger, answered, NoOptions(), "conll"))  # a block of lines per sentence
    as_conll = examples(tagger, conll.split("\n"), input_format="conll")
    for read in (as_json, as_conll):
        assert [e.tokens for e in read] == [p.tokens for _, p in answered] and [list(e.gold) for e in read] == tags


def answer_keys(task) -> set[str]:
    return {field.name for field in dataclasses.fields(task.Prediction) if field.default is dataclasses.MISSING}


def rounded(value, digits: int):
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    return [rounded(item, digits) for item in value] if isinstance(value, (list, tuple)) else value
