"""One CLI vocabulary: the same flag spelt the same in every command, old spellings accepted for one release
with a note, overrides both bare and with --set, and one DecodingConfig from every command's decoding flags."""

from __future__ import annotations

import pytest

from textnn.cli import _decoding, parse
from textnn.errors import TextnnError
from textnn.generation.decoding import DecodingConfig


@pytest.mark.parametrize("argv", [
    ["train", "c.yaml", "train.lr=0.1", "--set", "train.epochs=2"],
    ["train", "c.yaml", "--set", "train.lr=0.1", "--resume", "train.epochs=2"],
])
def test_train_takes_overrides_bare_and_with_set(argv):
    args = parse(argv)
    assert sorted(args.overrides + args.set_overrides) == ["train.epochs=2", "train.lr=0.1"]


@pytest.mark.parametrize("argv", [
    ["compare", "a.yaml", "b.yaml", "--set", "train.epochs=2", "train.lr=0.1"],
    ["compare", "a.yaml", "b.yaml", "train.lr=0.1", "train.epochs=2", "--output-dir", "out"],
])
def test_compare_takes_overrides_bare_and_with_set(argv):
    args = parse(argv)
    assert args.configs == ["a.yaml", "b.yaml"]
    assert sorted(args.overrides + args.set_overrides) == ["train.epochs=2", "train.lr=0.1"]


@pytest.mark.parametrize("old, new, dest, value", [
    (["translate", "RUN", "--beam", "4", "--nbest", "3"], ["translate", "RUN", "--beam", "4", "--n-best", "3"],
     "n_best", 3),
    (["generate", "RUN", "--file", "p.txt"], ["generate", "RUN", "p.txt"], "input", "p.txt"),
    (["visualize", "RUN", "--file", "t.txt"], ["visualize", "RUN", "t.txt"], "input", "t.txt"),
    (["visualize", "RUN", "--text", "x", "--output", "v"], ["visualize", "RUN", "--text", "x", "--output-dir", "v"],
     "output_dir", "v"),
])
def test_an_old_spelling_is_read_as_the_new_one_with_a_one_line_note(capsys, old, new, dest, value):
    assert getattr(parse(new), dest) == value and capsys.readouterr().err == ""
    assert getattr(parse(old), dest) == value
    [note] = capsys.readouterr().err.splitlines()
    old_flag = next(arg for arg in old if arg.startswith("--") and arg not in new)
    assert note.startswith(f"note: {old_flag} is deprecated")


@pytest.mark.parametrize("old, new, dest, value", [
    (["evaluate", "RUN", "--data", "d.tsv"], ["evaluate", "RUN", "d.tsv"], "data", "d.tsv"),
    (["evaluate", "--data", "d.tsv", "RUN"], ["evaluate", "RUN", "d.tsv"], "data", "d.tsv"),
    (["compare", "a.yaml", "--runs-dir", "out"], ["compare", "a.yaml", "--output-dir", "out"], "runs_dir", "out"),
])
def test_a_spelling_older_than_the_one_vocabulary_is_still_read_as_the_new_one(old, new, dest, value):
    """`evaluate --data FILE` and `compare --runs-dir DIR`, in scripts everywhere, are read silently."""
    assert getattr(parse(old), dest) == getattr(parse(new), dest) == value


@pytest.mark.parametrize("argv, method, expected", [
    (["translate", "RUN"], "greedy", DecodingConfig()),
    (["translate", "RUN", "--beam", "5", "--n-best", "2"], "greedy",
     DecodingConfig(method="beam", beam_size=5, n_best=2)),
    (["evaluate", "RUN", "--data", "d", "--beam", "3", "--length-penalty", "1"], "greedy",
     DecodingConfig(method="beam", beam_size=3, length_penalty=1.0)),
    (["generate", "RUN", "--top-k", "5", "--seed", "3"], "sample",
     DecodingConfig(method="sample", top_k=5, seed=3, stop_at_eos=False)),
    (["generate", "RUN", "--beam", "2", "--max-tokens", "7"], "sample",
     DecodingConfig(method="beam", beam_size=2, max_tokens=7, stop_at_eos=False)),
])
def test_every_command_builds_its_decoding_from_the_same_flags(argv, method, expected):
    assert _decoding(parse(argv), method) == expected


@pytest.mark.parametrize("argv, message", [
    (["translate", "RUN", "--length-penalty", "1"], "add --beam K"),
    (["translate", "RUN", "--n-best", "2"], "add --beam K"),
    (["evaluate", "RUN", "--data", "d", "--length-penalty", "1"], "add --beam K"),
    (["generate", "RUN", "--n-best", "2"], "add --beam K"),
    (["generate", "RUN", "--beam", "2", "--greedy"], "--beam and --greedy"),
    (["translate", "RUN", "--beam", "2", "--n-best", "3"], "n_best (--n-best) must be an integer in [1, beam_size"),
])
def test_a_combination_of_decoding_flags_is_refused_in_one_place_with_the_same_words(argv, message):
    with pytest.raises(TextnnError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        _decoding(parse(argv), "greedy")
