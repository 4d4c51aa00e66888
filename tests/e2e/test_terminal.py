"""Every task's `evaluate` on a terminal, as README's Quick start runs it.

On a terminal the progress bar redraws five times a second, and each redraw once came back from the
bar's forward hook as the model's output (`'bool' object has no attribute 'logits'`). A log redraws
every ten seconds, so only a terminal (a pseudo-terminal here) and an evaluation that lasts longer
than a redraw's interval show it: each evaluation below reads enough batches, one example each, to
take a few tenths of a second at least, and the test checks that the bar was in fact redrawn.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e import terminal
from tests.e2e.test_bert_tasks_cli import squad_fixture
from tests.e2e.test_hostile_use import CONFIGS, WORDS, config_text
from tests.e2e.test_tagging_cli import write_toy_ner
from tests.e2e.test_translation_cli import write_corpus

REPO = Path(__file__).resolve().parents[2]
# The evaluation data of each task: more examples than its training data, for an evaluation that redraws.
EVALUATION = {"classification": "big.tsv", "tagging": "big_ner.txt", "language_modeling": "big_lm.txt",
              "translation": "big_mt", "pretraining": "big_corpus.txt", "qa": "big_squad.json"}


def on_a_terminal(*args: str, cwd: Path) -> tuple[int, str, str]:
    """Run `python -m textnn ARGS` with its stderr on a pseudo-terminal (stdout a pipe, as `| jq` would
    have it): the exit code, stdout, and everything the terminal showed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return terminal.on_a_terminal([sys.executable, "-m", "textnn", *args], cwd=cwd, env=env)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Each task's tiny training data (as the hostile-use tests have it) and a larger evaluation set."""
    root = tmp_path_factory.mktemp("terminal")
    rng = random.Random(0)
    write_sentiment_tsv(root / "train.tsv", 40, seed=1)
    write_toy_ner(root / "ner.txt", 30, seed=1)
    squad_fixture(root / "squad.json", articles=3, seed=1)
    write_corpus(root, "mt", 40, seed=1)
    (root / "lm.txt").write_text("".join(" ".join(rng.choices(WORDS, k=8)) + "\n" for _ in range(80)),
                                 encoding="utf-8")
    docs = ["\n".join(" ".join(rng.choices(WORDS, k=6)) + " ." for _ in range(4)) for _ in range(10)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")

    write_sentiment_tsv(root / "big.tsv", 3000, seed=2)
    write_toy_ner(root / "big_ner.txt", 1000, seed=2)
    squad_fixture(root / "big_squad.json", articles=30, seed=2)
    write_corpus(root, "big_mt", 200, seed=2)
    (root / "big_lm.txt").write_text("".join(" ".join(rng.choices(WORDS, k=8)) + "\n" for _ in range(3000)),
                                     encoding="utf-8")
    docs = ["\n".join(" ".join(rng.choices(WORDS, k=6)) + " ." for _ in range(4)) for _ in range(200)]
    (root / "big_corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("task", list(EVALUATION))
def test_evaluate_on_a_terminal_draws_its_bar_and_answers(root, task):
    assert task in CONFIGS
    # progress on (the hostile-use configs turn it off): evaluate draws its bar as the run's config says
    config = config_text(root, task).replace("progress: false", "progress: true")
    (root / f"{task}.yaml").write_text(config, encoding="utf-8")
    run = f"runs/{task}"
    trained = subprocess.run([sys.executable, "-m", "textnn", "-q", "train", f"{task}.yaml", "--run-dir", run],
                             cwd=root, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert trained.returncode == 0, trained.stderr[-2000:]

    code, stdout, shown = on_a_terminal("evaluate", run, "--data", EVALUATION[task], "--batch-size", "1",
                                        "--bootstrap", "0", cwd=root)
    assert code == 0 and "Traceback" not in shown, shown[-3000:]
    assert stdout.strip(), shown[-3000:]  # the metrics
    # the first frame, drawn as the bar opens, and at least one redraw, which came from the hook's update
    frames = [frame for frame in shown.split("\r") if f"evaluate {task}" in frame and "batch" in frame]
    assert len(frames) >= 2, shown[-3000:]
