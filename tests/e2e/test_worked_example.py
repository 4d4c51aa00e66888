"""README's worked example of a task of one's own ("Add your own task", examples/nli/nli_task.py) stays short and
true: the file is at most 150 lines, README's pieces of it are its own lines, and README's commands for it run as
a user runs them (real processes, real RTE files, a few training steps) with `predict` printing the fields the
task's Prediction declares. A run naming the task needs its module importable, and never takes it from the
run's own folder."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, shared_data
from tests.e2e.test_readme import Command, as_run_here, environment, readme_commands, textnn_args

EXAMPLE = REPO / "examples" / "nli" / "nli_task.py"
SECTION = "Add your own task"
MAX_LINES = 150
TIMEOUT = 300


def section_text() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {SECTION}\n")
    return text[start:text.index("\n## ", start + 1)]


def section_commands() -> list[Command]:
    commands = [command for command in readme_commands() if command.section == SECTION]
    assert [textnn_args(command.words())[0] for command in commands] == ["train", "evaluate", "predict"], commands
    return commands


def test_the_example_is_short():
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"{EXAMPLE} has {len(lines)} lines; the worked example is read in one sitting"


def test_readme_shows_the_example_as_it_is():
    """Every Python block of the section is a run of the file's own lines, so README cannot drift from it."""
    code = EXAMPLE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", section_text(), flags=re.S)
    assert len(blocks) >= 4, "the section walks through the file in pieces"
    for block in blocks:
        assert block in code, f"README's piece is not in {EXAMPLE.name}:\n{block}"


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> tuple[Path, dict]:
    """A folder laid out like the repository (recipes/, examples/, ../shared/data/ the real data), and the
    environment README's commands run in there."""
    for name in ("train.tsv", "dev.tsv"):
        shared_data("glue", "RTE", name)  # skips, saying why, without the real data
    base = tmp_path_factory.mktemp("worked_example")
    (base / "shared").mkdir()
    (base / "shared" / "data").symlink_to(REPO.parent / "shared" / "data", target_is_directory=True)
    work = base / "textnn"
    work.mkdir()
    for folder in ("recipes", "examples"):
        (work / folder).symlink_to(REPO / folder, target_is_directory=True)
    return work, environment(base, Path(sys.executable).parent)  # README's `python` is this one


def run(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def outputs(place) -> dict[str, subprocess.CompletedProcess]:
    """README's commands of the section, run in order (a training gets a few steps of the tiny model): what
    each printed, by its command."""
    work, env = place
    done = {}
    for command in section_commands():
        verb = textnn_args(command.words())[0]
        done[verb] = finished = run(as_run_here(command), work, env)
        assert finished.returncode == 0, f"`{command.line}` exited {finished.returncode}:\n{finished.stderr[-3000:]}"
    return done


def test_train_and_evaluate_as_readme_says(place, outputs):
    work, _ = place
    status = json.loads((work / "runs" / "rte_nli" / "run.json").read_text(encoding="utf-8"))
    assert status["status"] == "finished", status
    assert "task: examples.nli.nli_task:NLITask" in (work / "runs" / "rte_nli" / "config.yaml").read_text()
    accuracy = re.search(r"^\s*accuracy: (\d\.\d+)$", outputs["evaluate"].stdout, flags=re.M)
    assert accuracy and 0 <= float(accuracy.group(1)) <= 1, outputs["evaluate"].stdout
    examples = re.search(r"^\s*examples: (\d+)$", outputs["evaluate"].stdout, flags=re.M)
    dev = (REPO.parent / "shared" / "data" / "glue" / "RTE" / "dev.tsv").read_text(encoding="utf-8")
    assert examples and int(examples.group(1)) == len(dev.splitlines()) - 1  # every pair after the header


def test_predict_prints_the_declared_prediction(place, outputs):
    from examples.nli.nli_task import NLIPrediction

    work, _ = place
    [command] = [c for c in section_commands() if textnn_args(c.words())[0] == "predict"]
    given = subprocess.run(["bash", "-c", command.line.split(" | ")[0]], capture_output=True, text=True).stdout
    premise, hypothesis = given.rstrip("\n").split("\t")
    [answer] = [json.loads(line) for line in outputs["predict"].stdout.splitlines()]
    assert list(answer) == [field.name for field in dataclasses.fields(NLIPrediction)]
    labels = json.loads((work / "runs" / "rte_nli" / "labels.json").read_text(encoding="utf-8"))
    assert sorted(labels) == ["entailment", "not_entailment"]
    assert (answer["premise"], answer["hypothesis"]) == (premise, hypothesis) and answer["label"] in labels
    assert 1 / len(labels) <= answer["probability"] <= 1  # the most probable label's probability


def test_a_run_needs_its_task_module(place, outputs, tmp_path):
    """A run whose task module cannot be imported is refused, saying so; a module in the run's own folder is
    never imported, even where that folder is the current one (on Python's path under `python -m`)."""
    work, env = place
    run_dir = tmp_path / "sent_run"
    shutil.copytree(work / "runs" / "rte_nli", run_dir)
    config = run_dir / "config.yaml"
    original = config.read_text(encoding="utf-8")
    config.write_text(original.replace("examples.nli.nli_task:NLITask", "elsewhere.nli:NLITask"), encoding="utf-8")
    done = run(f"printf 'a\\tb\\n' | {sys.executable} -m textnn predict {run_dir}", work, env)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "module elsewhere.nli cannot be imported here" in done.stderr and "PYTHONPATH" in done.stderr, done.stderr
    marker = tmp_path / "imported"
    (run_dir / "planted.py").write_text(f"open({str(marker)!r}, 'w').close()\nfrom examples.nli.nli_task import *\n")
    config.write_text(original.replace("examples.nli.nli_task:NLITask", "planted:NLITask"), encoding="utf-8")
    done = run(f"printf 'a\\tb\\n' | {sys.executable} -m textnn predict .", run_dir, env)
    assert done.returncode != 0 and "never from inside the run directory" in done.stderr, done.stderr
    assert not marker.exists()
