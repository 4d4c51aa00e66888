"""Resources without bounds, standard output that cannot be written and output places that cannot be used,
as a user meets them (docs/RELIABILITY.md, "Hostile use", items 16, 11 and 12).

Beam widths, n-best lists, new tokens and samples are bounded by the input-size policy (textnn/limits.py)
where the options are read and again where a DecodingConfig is made (the Python API); `generate` writes
one sample as its tokens come. Every command that writes to standard output, when it cannot (`> /dev/full`),
stops with one line and exit code 2. Every output place is checked before any work starts.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_hostile_use import config_text, one_line, root, runs  # noqa: F401 (fixtures)
from textnn import limits
from textnn.api import load
from textnn.cli import main
from textnn.generation.decoding import DecodingConfig

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def exit_code(argv: list[str]) -> int:
    """main(argv)'s exit code, an argparse refusal (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as done:
        return done.code


# ------------------------------------------------------------------------------------------- item 16

@pytest.mark.parametrize("command,option,value", [
    ("generate", "--beam", 100_000), ("generate", "--beam", 10 ** 9), ("generate", "--n-best", 10 ** 6),
    ("generate", "--max-tokens", 10 ** 9), ("generate", "--num-samples", 10 ** 6),
    ("translate", "--beam", 100_000), ("translate", "--n-best", 5000), ("evaluate", "--beam", 10 ** 9)])
def test_a_beam_or_token_count_past_its_limit_is_refused_before_the_run_is_read(runs, capsys, command, option,
                                                                                value):
    run = runs("language_modeling" if command == "generate" else "translation")
    extra = ["--data", str(run.parent.parent / "mt")] if command == "evaluate" else []
    code = exit_code([command, str(run), option, str(value), *extra])
    one_line(code, capsys.readouterr().err, option, f"{value:,}", "textnn explain limits")


@pytest.mark.parametrize("field,value", [("beam_size", limits.MAX_BEAM + 1), ("max_tokens", limits.MAX_NEW_TOKENS + 1)])
def test_the_python_api_refuses_the_same_limits(field, value):
    with pytest.raises(limits.TextnnError, match="limit"):
        DecodingConfig(method="beam", **{field: value})
    DecodingConfig(method="beam", beam_size=limits.MAX_BEAM, n_best=limits.MAX_BEAM, max_tokens=limits.MAX_NEW_TOKENS)


def test_generate_writes_its_tokens_as_they_come(runs):
    """The first tokens are read while the process still generates (100,000 of them, no stop at a line end):
    a process that printed only at its end would have ended, or still be silent, when they are read."""
    run = runs("language_modeling")
    proc = subprocess.Popen([sys.executable, "-m", "textnn", "generate", str(run), "--prompt", "the cat",
                             "--max-tokens", str(limits.MAX_NEW_TOKENS), "--seed", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 240)  # a guard against waiting forever, not a timing
        assert ready, "nothing written while generating"
        first = os.read(proc.stdout.fileno(), 4096).decode()
        assert first.startswith("the cat") and proc.poll() is None, (first, proc.poll())
        grown = os.read(proc.stdout.fileno(), 4096).decode()  # blocks until more comes
        assert grown and proc.poll() is None
    finally:
        proc.kill()
        proc.communicate(timeout=60)


def test_a_streamed_sample_is_the_text_of_the_same_sample_written_at_once(runs, capsys):
    """One sample (written as it comes) equals the first of the same seed's samples written at the end."""
    run = str(runs("language_modeling"))
    assert main(["generate", run, "--prompt", "the cat", "--max-tokens", "40", "--seed", "11"]) == 0
    streamed = capsys.readouterr().out
    assert main(["generate", run, "--prompt", "the cat", "--max-tokens", "40", "--greedy"]) == 0
    greedy = capsys.readouterr().out
    assert main(["generate", run, "--prompt", "the cat", "--max-tokens", "40", "--greedy", "--num-samples", "2"]) == 0
    both = capsys.readouterr().out.splitlines()
    assert greedy.rstrip("\n") == both[1] == both[3] and streamed.startswith("the cat")


# ------------------------------------------------------------------------------------------- item 11

FULL = Path("/dev/full")
needs_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
# Every command that writes to standard output, on the tiny run of a task (`runs` fixture) or none.
COMMANDS = {
    "evaluate": ("classification", ["evaluate", "RUN", "--data", "ROOT/train.tsv"]),
    "predict": ("classification", ["predict", "RUN", "ROOT/train.tsv"]),
    "translate": ("translation", ["translate", "RUN", "ROOT/mt.de"]),
    "translate --n-best": ("translation", ["translate", "RUN", "ROOT/mt.de", "--beam", "2", "--n-best", "2"]),
    "generate": ("language_modeling", ["generate", "RUN", "--prompt", "the cat", "--max-tokens", "20", "--seed", "1"]),
    "generate --num-samples": ("language_modeling", ["generate", "RUN", "--max-tokens", "5", "--num-samples", "3",
                                                     "--seed", "1"]),
    "generate --n-best": ("language_modeling", ["generate", "RUN", "--max-tokens", "5", "--beam", "2",
                                                "--n-best", "2"]),
    "generate FILE": ("language_modeling", ["generate", "RUN", "ROOT/lm.txt", "--max-tokens", "3", "--greedy"]),
    "neighbors": ("embeddings", ["neighbors", "RUN", "cat", "dog"]),
    "analogy": ("embeddings", ["analogy", "RUN", "cat", "dog", "mat"]),
    "visualize": ("language_modeling", ["visualize", "RUN", "--text", "the cat sat", "--output-dir", "TMP/views"]),
    "export": ("pretraining", ["export", "RUN", "TMP/exported"]),
    "runs": ("classification", ["runs", "ROOT/runs"]),
    "explain": (None, ["explain"]),
    "explain limits": (None, ["explain", "limits"]),
    "train": (None, ["train", "ROOT/classification.yaml", "--run-dir", "TMP/run"]),
    "compare": (None, ["compare", "ROOT/classification.yaml", "--output-dir", "TMP/compare"]),
}


@needs_full
@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_on_a_full_standard_output_is_one_line(root, runs, tmp_path, capsys, monkeypatch, name):
    """`textnn COMMAND > /dev/full`: one line, exit 2, no traceback, whichever command wrote; a run that a
    command trained is finished and whole (its outputs come after it)."""
    task, argv = COMMANDS[name]
    run = runs(task or "classification")  # train and compare read the classification config it writes
    runs("translation")  # the config's data (mt.de) exists once the translation fixture ran
    argv = [item.replace("RUN", str(run)).replace("ROOT", str(root)).replace("TMP", str(tmp_path)) for item in argv]
    capsys.readouterr()
    with open(FULL, "w", encoding="utf-8") as full:
        monkeypatch.setattr(sys, "stdout", full)
        code = main(argv)
    one_line(code, capsys.readouterr().err, "standard output", "full")
    for trained in (tmp_path / "run", tmp_path / "compare" / "classification"):
        if trained.exists():
            assert json.loads((trained / "run.json").read_text())["status"] == "finished"
            assert (trained / "model.safetensors").is_file() and (trained / "report.md").is_file()


@needs_full
@pytest.mark.parametrize("args", [["explain"],
                                  ["generate", "RUN", "--prompt", "the", "--max-tokens", "4", "--seed", "2"],
                                  ["predict", "RUN_CLASSIFY", "-"]])
def test_a_full_standard_output_as_the_shell_gives_it(runs, args):
    """`textnn ... > /dev/full` in a real process: the one line, and no second complaint at exit."""
    args = [a.replace("RUN_CLASSIFY", str(runs("classification"))).replace("RUN", str(runs("language_modeling")))
            for a in args]
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-m", "textnn", *args], stdout=full, stderr=subprocess.PIPE,
                              input=b"a good film\n" * 3, env=ENV, timeout=300)
    one_line(done.returncode, done.stderr.decode(), "standard output", "full")


# ------------------------------------------------------------------------------------------- item 12

@pytest.mark.parametrize("option", ["--output-dir", "--output"])
def test_visualize_onto_a_file_is_refused_before_the_run_is_read(runs, tmp_path, capsys, option):
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    code = main(["visualize", str(runs("language_modeling")), "--text", "the cat", option, str(target)])
    one_line(code, capsys.readouterr().err, str(target), "in the way")
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("place,expected", [("DIR", "a directory of that name is in the way"),
                                            ("DIR/missing/table.md", "does not exist"),
                                            ("FILE/table.md", "is a file, not a folder")])
def test_compare_markdown_onto_an_unusable_place_is_refused_before_any_training(root, runs, tmp_path, capsys, place,
                                                                                expected):
    runs("classification")  # writes ROOT/classification.yaml
    (tmp_path / "DIR").mkdir()
    (tmp_path / "FILE").write_text("x")
    markdown = str(tmp_path / place)
    code = main(["compare", str(root / "classification.yaml"), "--output-dir", str(tmp_path / "compare"),
                 "--markdown", markdown])
    one_line(code, capsys.readouterr().err, "--markdown", expected)
    assert not (tmp_path / "compare").exists()  # nothing trained


def test_compare_runs_dir_onto_a_file_is_refused_before_any_training(root, runs, tmp_path, capsys):
    runs("classification")
    (tmp_path / "FILE").write_text("x")
    code = main(["compare", str(root / "classification.yaml"), "--output-dir", str(tmp_path / "FILE")])
    one_line(code, capsys.readouterr().err, "--output-dir", "in the way")


def test_compare_writes_its_markdown_table(root, runs, tmp_path, capsys):
    runs("classification")
    code = main(["compare", str(root / "classification.yaml"), "--output-dir", str(tmp_path / "compare"),
                 "--markdown", str(tmp_path / "table.md")])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "table.md").read_text().startswith("| config |")


@pytest.mark.parametrize("command", ["predict", "translate"])
def test_output_onto_a_directory_is_refused_before_the_run_is_read(root, runs, tmp_path, capsys, command):
    run = runs("classification" if command == "predict" else "translation")
    code = main([command, str(run), str(root / "mt.de"), "-o", str(tmp_path)])
    one_line(code, capsys.readouterr().err, str(tmp_path), "directory")


@pytest.mark.parametrize("cut", ["header", "body"])
@pytest.mark.parametrize("start", ["run", "huggingface"])
def test_features_from_a_start_with_truncated_weights_is_one_line(root, runs, tmp_path, capsys, cut, start):
    """data.features_from a BERT run (or its Hugging Face export) whose model.safetensors was cut short."""
    source = tmp_path / "start"
    if start == "run":
        shutil.copytree(runs("pretraining"), source)
    else:
        assert main(["export", str(runs("pretraining")), str(source)]) == 0
    weights = source / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:100] if cut == "header" else data[:-100])
    config = tmp_path / "tag.yaml"
    config.write_text(f"task: tagging\ndata: {{format: conll, tag_scheme: iob1, train: {root / 'ner.txt'}, "
                      f"dev: {root / 'ner.txt'}, features_from: {source}}}\nmodel: {{name: rnn_tagger, preset: tiny}}\n"
                      "train: {max_steps: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n",
                      encoding="utf-8")
    capsys.readouterr()
    code = main(["train", str(config), "--run-dir", str(tmp_path / "run")])
    one_line(code, capsys.readouterr().err, str(weights), "damaged")
    assert not (tmp_path / "run").exists()


def test_train_onto_a_file_names_the_run_dir_before_the_data_is_read(root, tmp_path, capsys):
    """The output place is checked first: a missing data file in the same config is not reached."""
    (tmp_path / "run").write_text("keep me\n")
    config = tmp_path / "c.yaml"
    config.write_text("task: classification\ndata: {format: tsv, train: NO_SUCH_FILE}\nmodel: {name: dan, preset: "
                      "tiny}\ntrain: {max_steps: 1, threads: 1, progress: false}\n", encoding="utf-8")
    code = main(["train", str(config), "--run-dir", str(tmp_path / "run")])
    one_line(code, capsys.readouterr().err, "--run-dir", "in the way")
    assert (tmp_path / "run").read_text() == "keep me\n"


# ------------------------------------------------------------------------------------- bootstrap resamples

def test_bootstrap_resamples_past_the_limit_are_refused_before_training_or_reading(root, runs, tmp_path, capsys):
    """A count of resamples beyond the limit asked for one score per resample at the end of a trained run,
    which then failed on its own report (a MemoryError traceback, the run marked failed)."""
    huge = 10 ** 11
    (tmp_path / "c.yaml").write_text(config_text(root, "classification"), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "textnn", "train", str(tmp_path / "c.yaml"), "--run-dir",
                           str(tmp_path / "run"), f"train.bootstrap_samples={huge}"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    one_line(proc.returncode, proc.stderr, "train.bootstrap_samples", f"{limits.MAX_BOOTSTRAP:,}",
             "textnn explain limits")
    assert not (tmp_path / "run").exists()
    run = runs("classification")
    code = exit_code(["evaluate", str(run), str(root / "train.tsv"), "--bootstrap", str(huge)])
    one_line(code, capsys.readouterr().err, "--bootstrap", f"{huge:,}", "textnn explain limits")
    with pytest.raises(limits.TextnnError, match="bootstrap_samples"):
        load(run).evaluate(root / "train.tsv", bootstrap_samples=limits.MAX_BOOTSTRAP + 1)

