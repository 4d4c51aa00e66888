"""Commands used the wrong way, as a careless or hostile user runs them (docs/RELIABILITY.md, "Hostile use").

Each mistake is one line on stderr, exit code 2, naming the file, line or value and what to do; nothing
is written before it. Matrices over every task run the CLI's `main()` in this process (a traceback would
surface here as an exception); the probes as the user ran them go through `python -m textnn`.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import shared_data, write_sentiment_tsv
from tests.e2e.test_bert_tasks_cli import squad_fixture
from tests.e2e.test_tagging_cli import write_toy_ner
from tests.e2e.test_translation_cli import write_corpus
from textnn.cli import main

REPO = Path(__file__).resolve().parents[2]
TRAIN = "train: {max_steps: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n"
# One small config per task; DATA holds each task's data files (train, dev and test read the same file).
CONFIGS = {
    "classification": "task: classification\ndata: {format: tsv, TRAIN_DEV_TEST}\nmodel: {name: dan, preset: tiny}\n",
    "tagging": "task: tagging\ndata: {format: conll, tag_scheme: iob1, TRAIN_DEV_TEST}\n"
               "model: {name: rnn_tagger, preset: tiny}\n",
    "language_modeling": "task: language_modeling\ndata: {format: text, tokenizer: whitespace, bptt: 8, TRAIN_DEV_TEST}\n"
                         "model: {name: rnn_lm, preset: tiny}\n",
    "translation": "task: translation\ndata: {format: parallel, source: de, target: en, bpe_vocab_size: 200, "
                   "TRAIN_DEV_TEST}\nmodel: {name: seq2seq, preset: tiny}\n",
    "pretraining": "task: pretraining\ndata: {wordpiece_vocab_size: 120, max_length: 32, TRAIN_DEV_TEST}\n"
                   "model: {name: bert, preset: tiny}\n",
    "embeddings": "task: embeddings\ndata: {format: text, min_freq: 1, TRAIN_DEV_TEST}\n"
                  "model: {name: word2vec, preset: tiny}\n",
    "qa": "task: qa\ndata: {max_length: 48, doc_stride: 16, max_query_length: 12, wordpiece_vocab_size: 150, "
          "TRAIN_DEV_TEST}\nmodel: {name: bert, preset: tiny}\n",
}
DATA = {"classification": ("train.tsv", "train.tsv"), "tagging": ("ner.txt", "ner.txt"),
        "language_modeling": ("lm.txt", "lm.txt"), "translation": ("mt", "mt"),
        "pretraining": ("corpus.txt", "corpus.txt"), "embeddings": ("lm.txt", "analogies.txt"),
        "qa": ("squad.json", "squad.json")}
WORDS = "the a cat dog sat ran on under mat rug and then".split()


def textnn(*args: str, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, input=input, capture_output=True,
                          text=True, timeout=300, env=env)


def one_line(code: int, stderr: str, *expected: str) -> str:
    """The one `error:` line of a refused command (its last line on stderr), holding every `expected` text."""
    lines = stderr.strip().splitlines()
    assert code == 2 and "Traceback" not in stderr, (code, stderr)
    errors = [line for line in lines if line.startswith("error")]
    assert errors == lines[-1:] and errors[0].startswith("error: "), stderr
    for text in expected:
        assert text in errors[0], (text, errors[0])
    return errors[0]


def config_text(root: Path, task: str, **files: str) -> str:
    """The task's config on its files, with `files` (train=..., dev=..., test=...; "" for none) in their place."""
    train, evaluation = DATA[task]
    paths = {"train": train, "dev": evaluation, "test": evaluation, **files}
    where = ", ".join(f"{split}: {root / name}" for split, name in paths.items() if name)
    return CONFIGS[task].replace("TRAIN_DEV_TEST", where) + TRAIN


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    rng = random.Random(0)
    write_sentiment_tsv(root / "train.tsv", 40, seed=1)
    write_toy_ner(root / "ner.txt", 30, seed=1)
    squad_fixture(root / "squad.json", articles=3, seed=1)
    write_corpus(root, "mt", 40, seed=1)
    (root / "lm.txt").write_text("".join(" ".join(rng.choices(WORDS, k=8)) + "\n" for _ in range(80)),
                                 encoding="utf-8")
    docs = ["\n".join(" ".join(rng.choices(WORDS, k=6)) + " ." for _ in range(4)) for _ in range(10)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (root / "analogies.txt").write_text(": animals\ncat dog mat rug\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def runs(root):
    """A tiny trained run of a task, trained on first use (`runs(task)` -> its directory)."""
    def run(task: str) -> Path:
        path = root / "runs" / task
        if not path.is_dir():
            (root / f"{task}.yaml").write_text(config_text(root, task), encoding="utf-8")
            assert main(["train", str(root / f"{task}.yaml"), "--run-dir", str(path)]) == 0
        return path
    return run


# ------------------------------------------------------------------------------------- missing data files

@pytest.mark.parametrize("split", ["train", "dev", "test"])
@pytest.mark.parametrize("task", list(CONFIGS))
def test_a_missing_data_file_is_named_before_anything_is_written(root, tmp_path, task, split, capsys):
    missing = tmp_path / "no_such_file"
    (tmp_path / "c.yaml").write_text(config_text(root, task, **{split: str(missing)}), encoding="utf-8")
    code = main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")])
    one_line(code, capsys.readouterr().err, str(missing))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("task", list(CONFIGS))
def test_evaluate_names_a_missing_data_file(runs, tmp_path, task, capsys):
    run = runs(task)
    capsys.readouterr()
    code = main(["evaluate", str(run), "--data", str(tmp_path / "no_such_file")])
    one_line(code, capsys.readouterr().err, str(tmp_path / "no_such_file"))


def test_the_tagging_recipe_with_a_missing_dev_file_says_so(tmp_path):
    train = shared_data("conll2003", "eng.train")
    proc = textnn("train", str(REPO / "recipes" / "conll_bilstm_softmax_rand.yaml"), f"data.train={train}",
                  "data.dev=NO_SUCH_FILE", "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    one_line(proc.returncode, proc.stderr, "NO_SUCH_FILE")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------- qa

DEEP = '{"question": "Where?", "context": ' + "[" * 100_000 + "]" * 100_000 + "}"
HUGE_NUMBER = '{"question": "Where?", "context": "In Oslo.", "id": ' + "9" * 5_000 + "}"


@pytest.mark.parametrize("task", ["qa", "classification", "tagging", "translation"])
@pytest.mark.parametrize("line, expected", [(DEEP, "nested too deeply"), (HUGE_NUMBER, "4,300 digits")])
def test_a_json_line_past_pythons_reader_is_one_line_naming_it(runs, task, line, expected):
    run = runs(task)
    first = json.dumps({"question": "Where?", "context": CONTEXT, "text": "the cat sat", "sentence": "the cat sat"})
    command = "translate" if task == "translation" else "predict"
    proc = textnn(command, str(run), input=f"{first}\n{line}\n", cwd=run.parent)
    one_line(proc.returncode, proc.stderr, "<stdin>:2", expected)


def test_json_output_holds_no_infinity_or_nan(runs, tmp_path):
    """A QA line with an empty context has no answer (its score -inf), and a run.json metric may be infinite
    or NaN: the JSON printed for them says null, which every JSON reader takes."""
    def strict(text: str):
        return json.loads(text, parse_constant=lambda word: pytest.fail(f"{word} in JSON output: {text}"))

    run = runs("qa")
    proc = textnn("predict", str(run), input=json.dumps({"question": "Where?", "context": ""}) + "\n", cwd=run.parent)
    assert proc.returncode == 0, proc.stderr
    assert strict(proc.stdout)["score"] is None
    folder = tmp_path / "runs"
    shutil.copytree(runs("classification"), folder / "copy")
    status = json.loads((folder / "copy" / "run.json").read_text(encoding="utf-8"))
    (folder / "copy" / "run.json").write_text(json.dumps({**status, "best": float("inf")}), encoding="utf-8")
    proc = textnn("runs", str(folder), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert strict(proc.stdout)["best"] is None

CONTEXT = "The treaty was signed in Oslo in 1905."


@pytest.mark.parametrize("item, field", [({"question": "Where?", "context": None}, "context"),
                                         ({"question": None, "context": CONTEXT}, "question"),
                                         ({"question": 5, "context": CONTEXT}, "question"),
                                         ({"question": "Where?"}, "context")])
def test_qa_predict_refuses_a_question_or_context_that_is_not_text(runs, item, field):
    run = runs("qa")
    lines = [json.dumps({"question": "Where?", "context": CONTEXT}), json.dumps(item)]
    proc = textnn("predict", str(run), input="\n".join(lines) + "\n", cwd=run.parent)
    one_line(proc.returncode, proc.stderr, "<stdin>:2", f'"{field}"')
    assert "None" not in proc.stdout


def squad(context: object = CONTEXT, question: object = "Where?", start: object = 25) -> dict:
    return {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "1", "question": question, "answers": [{"text": "Oslo", "answer_start": start}]}]}]}]}


NOT_SQUAD = {  # valid JSON, not SQuAD's structure: what the message must name
    "data-not-a-list": ({"data": 5}, '"data"'),
    "article-not-an-object": ({"data": [1]}, "data[0]"),
    "no-context": ({"data": [{"paragraphs": [{"qas": []}]}]}, '"context"'),
    "null-context": (squad(context=None), '"context"'),
    "null-question": (squad(question=None), '"question"'),
    "answer-start-not-a-number": (squad(start="abc"), '"answer_start"'),
    "nested-too-deep": ("[" * 100_000 + "]" * 100_000, "nested"),
    "answer-start-of-100000-digits": (json.dumps(squad()).replace('"answer_start": 25', '"answer_start": '
                                                                  + "7" * 100_000), "4,300 digits"),
}


@pytest.mark.parametrize("command", ["train", "evaluate"])
@pytest.mark.parametrize("case", list(NOT_SQUAD))
def test_qa_data_that_is_json_but_not_squad_is_one_line(root, runs, tmp_path, case, command, capsys):
    content, expected = NOT_SQUAD[case]
    bad = tmp_path / "bad.json"
    bad.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    if command == "train":
        (tmp_path / "c.yaml").write_text(config_text(root, "qa", train=str(bad)), encoding="utf-8")
        code = main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")])
        assert not (tmp_path / "run").exists()
    else:
        run = runs("qa")
        capsys.readouterr()
        code = main(["evaluate", str(run), "--data", str(bad)])
    one_line(code, capsys.readouterr().err, str(bad), expected, '{"data": [')


# --------------------------------------------------------------------------------------- train options

@pytest.mark.parametrize("override, expected", [("train.seed=-1", "train.seed"), (f"train.seed={2 ** 32}", "train.seed"),
                                                ("train.threads=100000", "train.threads")])
def test_a_seed_or_thread_count_out_of_range_is_refused_before_the_run_is_made(root, tmp_path, override, expected):
    (tmp_path / "c.yaml").write_text(config_text(root, "classification"), encoding="utf-8")
    proc = textnn("train", str(tmp_path / "c.yaml"), override, "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    line = one_line(proc.returncode, proc.stderr, expected)
    assert str(2 ** 32 - 1 if expected == "train.seed" else 1024) in line
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------- integer options

# Every integer option where a negative value (or zero, for a count of things to show) means nothing:
# (the command line up to the option, the option, the smallest value it takes). The run is never read:
# the value is refused as the arguments are parsed.
INTEGER_OPTIONS = [
    (["evaluate", "RUN", "--data", "d.txt"], "--bootstrap", 0), (["evaluate", "RUN", "--data", "d.txt"], "--streams", 1),
    (["evaluate", "RUN", "--data", "d.txt"], "--top-n", 1), (["evaluate", "RUN", "--data", "d.txt"], "--beam", 1),
    (["neighbors", "RUN", "cat"], "-k", 1), (["analogy", "RUN", "a", "b", "c"], "-k", 1),
    (["translate", "RUN"], "--beam", 1), (["translate", "RUN", "--beam", "4"], "--n-best", 1),
    (["generate", "RUN"], "--max-tokens", 1), (["generate", "RUN"], "--top-k", 0), (["generate", "RUN"], "--beam", 1),
    (["generate", "RUN", "--beam", "4"], "--n-best", 1), (["generate", "RUN"], "--num-samples", 1),
    (["generate", "RUN"], "--seed", 0), (["demo"], "--seed", 0),
]


@pytest.mark.parametrize("command, option, smallest", INTEGER_OPTIONS,
                         ids=[f"{c[0]}{o}" for c, o, _ in INTEGER_OPTIONS])
def test_an_integer_option_below_its_range_is_refused_as_the_arguments_are_parsed(tmp_path, command, option, smallest):
    for value in (smallest - 1, -5):
        proc = textnn(*command, option, str(value), cwd=tmp_path)
        line = one_line(proc.returncode, proc.stderr, option, str(value), f">= {smallest}")
        assert f"textnn {command[0]} --help" in line and proc.stdout == ""
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------- translate

@pytest.mark.parametrize("task, command", [("classification", "predict"), ("tagging", "predict"),
                                           ("language_modeling", "generate")])
def test_translate_on_a_run_that_does_not_translate_names_the_command_that_reads_it(runs, task, command):
    run = runs(task)
    proc = textnn("translate", str(run), "--beam", "3", input="the cat sat on the mat\n", cwd=run.parent)
    one_line(proc.returncode, proc.stderr, str(run), "translation run", f"textnn {command}")
    assert proc.stdout == ""


# ------------------------------------------------------------------------------------------- word2vec

@pytest.mark.parametrize("corpus", ["hello\n", "one\nword\nper\nline\none\n"])
def test_word2vec_on_a_corpus_without_a_window_is_refused_before_the_run_is_made(root, tmp_path, corpus):
    (tmp_path / "corpus.txt").write_text(corpus, encoding="utf-8")
    (tmp_path / "c.yaml").write_text(config_text(root, "embeddings", train=str(tmp_path / "corpus.txt"), dev="",
                                                 test=""), encoding="utf-8")
    proc = textnn("train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    one_line(proc.returncode, proc.stderr, str(tmp_path / "corpus.txt"), "window")
    assert not (tmp_path / "run").exists()



@pytest.mark.parametrize("corpus, min_freq, counts", [("hello hello hello\nhello hello\n", 1, "(1 distinct words, 5 tokens)"),
                                                      ("the cat the dog\nthe the\n", 2, "(3 distinct words, 6 tokens)")])
def test_word2vec_on_a_corpus_of_one_word_type_is_refused_before_the_run_is_made(root, tmp_path, corpus, min_freq,
                                                                                 counts):
    """Lines of one word repeated have windows, but nothing to tell the word from: 0 steps, `finished`."""
    (tmp_path / "corpus.txt").write_text(corpus, encoding="utf-8")
    (tmp_path / "c.yaml").write_text(config_text(root, "embeddings", train=str(tmp_path / "corpus.txt"), dev="",
                                                 test=""), encoding="utf-8")
    proc = textnn("train", str(tmp_path / "c.yaml"), f"data.min_freq={min_freq}", "--run-dir", str(tmp_path / "run"),
                  cwd=tmp_path)
    one_line(proc.returncode, proc.stderr, str(tmp_path / "corpus.txt"), "one word type", f"data.min_freq={min_freq}",
             counts, "at least 2")
    assert not (tmp_path / "run").exists()

# ------------------------------------------------------------------------------------------ classification

def test_labels_that_look_like_text_are_warned_about_and_training_goes_on(root, tmp_path, capsys):
    rows = write_sentiment_tsv(tmp_path / "train.tsv", 200, seed=3).read_text(encoding="utf-8").splitlines()
    texts = {row.split("\t")[0] for row in rows[1:]}
    assert len(texts) > 100  # as many classes as distinct sentences, if the columns are swapped
    config = config_text(root, "classification", train=str(tmp_path / "train.tsv"), dev="", test="")
    (tmp_path / "c.yaml").write_text(config, encoding="utf-8")
    proc = textnn("train", str(tmp_path / "c.yaml"), "data.text_column=label", "data.label_column=sentence",
                  "--run-dir", str(tmp_path / "swapped"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{len(texts)} distinct labels" in warnings[0], proc.stderr
    assert all(key in warnings[0] for key in ("'sentence'", "data.text_column", "data.label_column"))
    assert json.loads((tmp_path / "swapped" / "run.json").read_text())["status"] == "finished"
    # the columns the right way round: two labels, no warning
    assert main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "right")]) == 0
    assert "warning" not in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- word vectors

@pytest.mark.filterwarnings("error")  # one line: no NumPy overflow warning before it
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e40"])
def test_a_word_vector_that_is_not_finite_is_named_by_file_and_line(root, tmp_path, value, capsys):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text(f"3 2\ngood 0.1 0.2\nbad {value} 0.3\nfilm 0.5 0.6\n", encoding="utf-8")
    config = config_text(root, "classification", dev="", test="").replace("data: {", f"data: {{vectors: {vectors}, ")
    (tmp_path / "c.yaml").write_text(config, encoding="utf-8")
    code = main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")])
    one_line(code, capsys.readouterr().err, f"{vectors}:3", value)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ TensorBoard

def test_a_full_disk_under_tensorboard_is_one_warning_and_training_goes_on(root, tmp_path, capsys, monkeypatch):
    from tensorboard.summary.writer.record_writer import RecordWriter

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RecordWriter, "write", full)
    (tmp_path / "c.yaml").write_text(config_text(root, "classification"), encoding="utf-8")
    assert main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run"), "train.tensorboard=true",
                 "train.log_every=1"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "Traceback" not in err and len(warnings) == 1, err
    assert str(tmp_path / "run" / "tensorboard") in warnings[0] and "No space left on device" in warnings[0]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"


def test_a_file_in_the_place_of_tensorboard_is_one_warning_and_the_resume_trains_on(root, tmp_path):
    (tmp_path / "c.yaml").write_text(config_text(root, "classification", dev="", test=""), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(run), "train.tensorboard=false",
                 "train.keep_checkpoint=last"]) == 0
    (run / "tensorboard").write_text("not a folder\n", encoding="utf-8")
    proc = textnn("train", str(tmp_path / "c.yaml"), "--run-dir", str(run), "--resume", "train.tensorboard=true",
                  "train.keep_checkpoint=last", "train.max_steps=4", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(run / "tensorboard") in warnings[0], proc.stderr
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "finished" and status["steps"] == 4
    assert (run / "tensorboard").read_text(encoding="utf-8") == "not a folder\n"


# ----------------------------------------------------------------------------------------- checkpoints

def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


@pytest.mark.parametrize("how", ["resume", "start-over"])
def test_temporary_files_of_killed_writers_are_removed_on_start_and_resume(root, tmp_path, how):
    (tmp_path / "c.yaml").write_text(config_text(root, "classification", dev="", test=""), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(run), "train.checkpoint_every=1",
                 "train.keep_checkpoint=last"]) == 0
    if how == "start-over":  # killed before its first checkpoint was renamed into place
        (run / "checkpoint" / "last.safetensors").unlink()
        (run / "run.json").unlink()
    dead, live = dead_pid(), os.getpid()
    stale = [run / "checkpoint" / f".last.safetensors.tmp-{dead}", run / f".model.safetensors.tmp-{dead}"]
    in_use = run / "checkpoint" / f".last.safetensors.tmp-{live}"  # a live process may still be writing it
    for path in (*stale, in_use):
        path.write_bytes(b"\0" * 4096)
    proc = textnn("train", str(tmp_path / "c.yaml"), "--run-dir", str(run), "--resume", "train.checkpoint_every=1",
                  "train.keep_checkpoint=last", "train.max_steps=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not any(path.exists() for path in stale) and in_use.exists()
