"""`textnn sweep` as a user runs it: a grid whose every trial is a run directory selected on validation, a sweep
killed with SIGKILL and run again (no finished trial runs twice), two processes sharing one study (each grid
point once), pruning (the run says `pruned`), and the one-line refusals of bad sweep files."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import shared_data, write_sentiment_tsv
from textnn.cli import main

optuna = pytest.importorskip("optuna", reason="textnn sweep needs Optuna (pip install 'textnn[sweep]')")

# No validation set of its own: every sweep below adds data.validation_split in its overrides.
RECIPE = """\
task: classification
data: {format: tsv, train: train.tsv, dev: dev.tsv}
model: {name: dan, preset: tiny}
train: {epochs: 1, batch_size: 16, eval_every: 5, lr: 0.01, threads: 1, progress: false, bootstrap_samples: 0,
        tensorboard: false}
"""
GRID = {"train.lr": [0.01, 0.1], "model.word_dropout": [0.0, 0.3]}


def sweep_file(root: Path, name: str, space: dict | None = None, **keys) -> Path:
    space = space or {key: {"values": values} for key, values in GRID.items()}
    body = {"recipe": "recipe.yaml", "overrides": ["data.validation_split=0.2"], "space": space,
            "metric": "accuracy", **keys}
    path = root / f"{name}.yaml"
    path.write_text(json.dumps(body), encoding="utf-8")  # JSON is YAML
    return path


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "textnn", *args]


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def textnn(root: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(command(*args), cwd=root, env=environment(), capture_output=True, text=True, timeout=900)
    assert (proc.returncode == 0) == ok, proc.stderr[-3000:]
    return proc


def study(url: str, name: str):
    return optuna.load_study(study_name=name, storage=url)


def status(run: Path) -> dict:
    return json.loads((run / "run.json").read_text(encoding="utf-8"))


def validation_records(run: Path) -> list[dict]:
    records = map(json.loads, (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines())
    return [record for record in records if record.get("split") == "validation"]


def grid_points() -> list[dict]:
    return [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]


def wait_for(condition, what: str, deadline: float = 600) -> None:
    """Poll until `condition()` (a generous deadline only guards against a hung test)."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    write_sentiment_tsv(root / "train.tsv", 300, seed=1)
    write_sentiment_tsv(root / "dev.tsv", 80, seed=2)
    (root / "recipe.yaml").write_text(RECIPE, encoding="utf-8")
    return root


def test_a_grid_runs_each_point_once_as_a_run_selected_on_validation(root: Path) -> None:
    path = sweep_file(root, "grid")
    proc = textnn(root, "sweep", str(path))
    folder = root / "runs" / "sweeps" / "grid"
    runs = sorted(folder.glob("trial-*/seed-0"))
    assert len(runs) == 4
    for run in runs:
        info = status(run)
        assert info["status"] == "finished" and info["selected_on"] == "validation" and info["metric"] == "accuracy"
        assert info["best"] == max(record["accuracy"] for record in validation_records(run))
        assert "accuracy" in info["dev"]  # dev evaluated once, on the kept weights

    trials = study(f"sqlite:///{folder / 'study.db'}", "grid").trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert sorted(map(json.dumps, (t.params for t in trials))) == sorted(map(json.dumps, grid_points()))
    for trial in trials:  # a trial's value is its run's best on validation
        assert trial.value == status(folder / f"trial-{trial.number:04d}" / "seed-0")["best"]

    lines = proc.stdout.splitlines()
    ended = [line for line in lines if line.startswith("trial ") and "COMPLETE" in line]
    assert len(ended) == 4
    header = lines.index(next(line for line in lines if line.startswith("trial  state")))
    table = lines[header + 1:header + 5]
    values = [float(line.split()[2]) for line in table]
    assert values == sorted(values, reverse=True) and len(table) == 4
    best = max(trials, key=lambda t: (t.value, -t.number))  # the first of equals, as the table ranks them
    assert f"best: trial {best.number}, validation accuracy {best.value:.4f}" in proc.stdout
    summary = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    assert summary["best"]["trial"] == best.number and summary["best"]["params"] == best.params
    assert [row["trial"] for row in summary["ranking"]] == [int(line.split()[0]) for line in table]

    # the printed command trains the best setting again, to the same validation value
    [reproduce] = [line.removeprefix("reproduce: ") for line in lines if line.startswith("reproduce: ")]
    assert reproduce == summary["best"]["command"] and reproduce.startswith("textnn train recipe.yaml ")
    textnn(root, *reproduce.split()[1:], "--run-dir", "again")
    assert status(root / "again")["best"] == best.value

    # the trial runs are runs like any other: listed, compared, evaluated
    listed = [json.loads(line) for line in textnn(root, "runs", str(folder), "--json").stdout.splitlines()]
    assert sorted(row["name"] for row in listed) == [str(run.relative_to(folder)) for run in runs]
    assert {row["status"] for row in listed} == {"finished"}
    compared = textnn(root, "compare", "--sweep", str(folder), "--top", "2").stdout.splitlines()
    assert compared[0].split()[:3] == ["config", "setting", "validation"] and len(compared) == 4
    assert compared[2].startswith(f"trial {best.number} ")
    evaluated = json.loads(textnn(root, "evaluate", str(runs[0]), "dev.tsv", "--bootstrap", "0", "--json").stdout)
    assert evaluated["accuracy"] == status(runs[0])["dev"]["accuracy"]

    # run again: nothing left to run; with an edited setting: refused, naming it
    again = textnn(root, "sweep", str(path)).stdout.splitlines()
    assert not [line for line in again if line.startswith("trial ") and not line.startswith("trial  state")]
    best_line = [line for line in lines if line.startswith("best: ")]
    assert [line for line in again if line.startswith("best: ")] == best_line
    assert len(study(f"sqlite:///{folder / 'study.db'}", "grid").trials) == 4
    path.write_text(path.read_text(encoding="utf-8").replace("validation_split=0.2", "validation_split=0.3"),
                    encoding="utf-8")
    refused = textnn(root, "sweep", str(path), ok=False)
    assert refused.stderr.startswith(f"error: {path}: the study 'grid'") and "data.validation_split: 0.2 -> 0.3" \
        in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_a_sweep_killed_mid_trial_goes_on_without_running_a_finished_trial_again(root: Path) -> None:
    path = sweep_file(root, "killed")
    folder = root / "runs" / "sweeps" / "killed"
    first = subprocess.Popen(command("sweep", str(path)), cwd=root, env=environment(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    second_run = folder / "trial-0001" / "seed-0"
    try:
        wait_for(lambda: (second_run / "run.json").is_file() and status(second_run).get("status") == "running",
                 "the second trial to start training")
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
    url = f"sqlite:///{folder / 'study.db'}"
    before = {t.number: t.state.name for t in study(url, "killed").trials}
    assert before[0] == "COMPLETE" and before[1] == "RUNNING"
    finished = folder / "trial-0000" / "seed-0" / "run.json"
    stamp = (finished.stat().st_mtime_ns, finished.read_bytes())

    proc = textnn(root, "sweep", str(path))
    trials = study(url, "killed").trials
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 4  # the budget: complete trials only
    assert sorted(map(json.dumps, (t.params for t in complete))) == sorted(map(json.dumps, grid_points()))
    assert (finished.stat().st_mtime_ns, finished.read_bytes()) == stamp  # trial 0 was not run again
    assert trials[0].state.name == "COMPLETE" and not proc.stdout.count("trial 0  ")
    killed = trials[1]
    assert killed.state.name == "FAIL" and "died" in killed.user_attrs["failed"]
    assert status(second_run)["status"] == "failed"  # its half-written run says so
    [retried] = [t for t in complete if t.user_attrs.get("retry_of") == 1]
    assert retried.params == killed.params and retried.number > killed.number  # a new trial
    assert len(trials) == 5


def test_two_processes_sharing_a_study_run_each_grid_point_once(root: Path) -> None:
    path = sweep_file(root, "shared", seeds=[0, 1])
    url = f"sqlite:///{root / 'shared.db'}"
    folder = root / "shared-runs"
    workers = [subprocess.Popen(command("sweep", str(path), "--storage", url, "--sweep-dir", str(folder)), cwd=root,
                                env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [worker.communicate(timeout=900) for worker in workers]
    for worker, (_, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stderr[-3000:]
    trials = study(url, "shared").trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert sorted(map(json.dumps, (t.params for t in trials))) == sorted(map(json.dumps, grid_points()))
    ran = [line.split()[1] for stdout, _ in outputs for line in stdout.splitlines()
           if line.startswith("trial ") and "COMPLETE  accuracy" in line]
    assert sorted(ran) == ["0", "1", "2", "3"]  # each trial ended in one process, once
    for trial in trials:  # two seeds each, the value their mean
        bests = [status(folder / f"trial-{trial.number:04d}" / f"seed-{seed}")["best"] for seed in (0, 1)]
        assert trial.value == pytest.approx(sum(bests) / 2)
    assert len(list(folder.glob("trial-*"))) == 4


def test_a_trial_below_the_pruning_threshold_stops_and_its_run_says_pruned(root: Path) -> None:
    threshold, warmup = 0.75, 10
    path = sweep_file(root, "pruned", space={"train.lr": {"values": [1e-5, 0.1]}}, seeds=[0, 1],
                      prune={"method": "threshold", "threshold": threshold, "warmup_steps": warmup})
    proc = textnn(root, "sweep", str(path))
    folder = root / "runs" / "sweeps" / "pruned"
    trials = study(f"sqlite:///{folder / 'study.db'}", "pruned").trials
    states = {}
    for trial in trials:
        first = folder / f"trial-{trial.number:04d}" / "seed-0"
        reported = {record["step"]: record["accuracy"] for record in validation_records(first)}
        assert trial.intermediate_values == reported  # the first seed's evaluations, reported to the trial
        below = [step for step, value in reported.items() if step >= warmup and value < threshold]
        states[trial.params["train.lr"]] = trial.state.name
        if below:  # stopped at its first report below the threshold: no dev, no second seed
            assert trial.state.name == "PRUNED" and max(reported) == below[0]
            info = status(first)
            assert info["status"] == "pruned" and info["stopped"] == "pruned" and info["dev"] == {}
            assert not (folder / f"trial-{trial.number:04d}" / "seed-1").exists()
            assert f"trial {trial.number}  PRUNED  accuracy {reported[below[0]]:.4f} at step {below[0]}" in proc.stdout
        else:
            assert trial.state.name == "COMPLETE"
            bests = [status(folder / f"trial-{trial.number:04d}" / f"seed-{seed}")["best"] for seed in (0, 1)]
            assert trial.value == pytest.approx(sum(bests) / 2)
    assert states == {1e-5: "PRUNED", 0.1: "COMPLETE"}  # the case tells the two apart
    listed = textnn(root, "runs", str(folder), "--json").stdout.splitlines()
    assert sorted(json.loads(row)["status"] for row in listed) == ["finished", "finished", "pruned"]


BAD = [
    ({"trails": 4}, "unknown key 'trails' (did you mean 'trials'?)"),
    ({"space": {"model.word_dropuot": {"values": [0.1]}}}, "space model.word_dropuot: unknown key model.word_dropuot; "
                                                           "did you mean 'word_dropout'?"),
    ({"space": {"model.word_dropout": {"low": 0.5, "high": 0.1}}, "sampler": "tpe", "trials": 2},
     "space model.word_dropout: low 0.5 and high 0.1: expected finite numbers with low < high"),
    ({"space": {"model.word_dropout": {"low": 0.1, "high": 0.5}}, "sampler": "grid"},
     "sampler grid takes lists only, and space model.word_dropout is a range"),
    ({"space": {"model.word_dropout": {"low": 0, "high": 0.5, "log": True}}, "trials": 2},
     "space model.word_dropout: log: true needs low > 0"),
    ({"space": {"train.lr": {"values": []}}}, "space train.lr: values: got [], expected a list of single values"),
    ({"space": {"train.lr": {"values": [-1.0]}}}, "space train.lr: -1.0 is refused:"),
    ({"space": {"train.lr": {"values": [0.1], "low": 1}}}, "space train.lr: got"),
    ({"space": {"data.tokenizer": {"low": 1, "high": 2}}, "trials": 2},
     "space data.tokenizer: a range needs a number option, and data.tokenizer is str; give values: [...]"),
    ({"space": {"train.seed": {"values": [1, 2]}}}, "space train.seed: not searched: list the seeds in seeds: [...]"),
    ({"trials": 9}, "trials: 9 is more than the grid's 4 points"),
    ({"recipe": "missing.yaml"}, "recipe: "),
    ({"overrides": "train.epochs=2"}, "overrides: got 'train.epochs=2', expected a list of dotted overrides"),
    ({"overrides": ["data.validation_split=0.2", "train.epoks=2"]},
     "overrides: unknown key train.epoks; did you mean 'epochs'?"),
    ({"prune": {"method": "median", "patience": 2}}, "prune: unknown key 'patience'"),
    ({"metric": "acuracy"}, "metric 'acuracy' is not one task classification reports"),
    ({"sampler": "tpe"}, "trials: missing; a tpe sweep needs a budget"),
]


@pytest.mark.parametrize("keys, expected", BAD, ids=[expected[:40] for _, expected in BAD])
def test_a_bad_sweep_file_is_one_line_naming_the_file_and_the_key(root: Path, capsys, monkeypatch, keys, expected):
    monkeypatch.chdir(root)
    path = sweep_file(root, "bad", **keys)
    assert main(["sweep", str(path), "--sweep-dir", str(root / "never")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path}: ") and expected in error and len(error.splitlines()) == 1, error
    assert not (root / "never").exists()


def test_a_sweep_run_where_the_recipe_s_data_is_not_is_refused_before_any_trial(root, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = sweep_file(root, "elsewhere")
    assert main(["sweep", str(path)]) == 2
    error = capsys.readouterr().err
    assert error == (f"error: {path}: data.train train.tsv of the recipe is not there; a recipe's data paths are read "
                     f"from the working folder ({tmp_path}): run the sweep from where the recipe is run (recipes/: the "
                     f"repository root)\n")
    assert not (tmp_path / "runs").exists()


def test_a_recipe_that_selects_on_dev_is_refused_with_the_fix(root: Path) -> None:
    path = sweep_file(root, "on-dev", overrides=["train.epochs=1"])
    refused = textnn(root, "sweep", str(path), ok=False)
    assert refused.stderr.startswith(f"error: {path}: the recipe ") and len(refused.stderr.splitlines()) == 1
    assert "add data.validation_split=0.1 to the sweep's overrides" in refused.stderr
    assert not (root / "runs" / "sweeps" / "on-dev").exists()


def test_without_optuna_the_sweep_says_how_to_install_it(root: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "optuna"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ImportError('not installed')\n", encoding="utf-8")
    env = {**environment(), "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(command("sweep", str(sweep_file(root, "no-optuna"))), cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr == 'error: textnn sweep needs Optuna, an optional dependency: pip install "textnn[sweep]"\n'


def test_a_storage_that_cannot_be_opened_is_one_line_and_leaves_no_folder(root: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(root)
    path = sweep_file(root, "storage")
    assert main(["sweep", str(path), "--storage", "nosuchdatabase://host/db", "--sweep-dir", "elsewhere"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: study storage nosuchdatabase://host/db: cannot open it (") and \
        len(error.splitlines()) == 1 and "give --storage a database URL" in error
    assert not (root / "elsewhere").exists()


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "recipes" / "sweeps").glob("*.yaml")),
                         ids=lambda path: path.name)
def test_every_sweep_recipe_is_a_valid_sweep(path: Path, monkeypatch) -> None:
    from textnn.sweep import load_sweep

    shared_data()  # the recipes' data (a sweep is refused where it is missing)
    monkeypatch.chdir(path.parents[2])  # the repository root, where recipes are run from
    sweep = load_sweep(path)
    assert sweep.recipe.is_file() and sweep.trials >= 1
    assert "data.validation_split=0.1" in sweep.overrides or sweep.base["data.validation"]
