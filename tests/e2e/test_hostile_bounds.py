"""Issue 25, items 16 (resources without bounds) and 11 (standard output that cannot be written), as a user
meets them (docs/RELIABILITY.md, "Hostile use").

Beam widths, n-best lists, new tokens and samples are bounded by the input-size policy (textnn/limits.py)
where the options are read and again where a DecodingConfig is made (the Python API); `generate` writes
one sample as its tokens come. Every command that writes to standard output, when it cannot (`> /dev/full`),
stops with one line and exit code 2.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_hostile_use import one_line, root, runs  # noqa: F401 (fixtures)
from textnn import limits
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
