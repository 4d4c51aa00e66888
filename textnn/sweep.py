"""`textnn sweep`: a search over a recipe's settings (Optuna) whose every trial is a normal run directory.

The sweep file (YAML; `load_sweep` checks every key):

    recipe: ../sst2_cnn_rand.yaml     # the config every trial starts from, relative to the sweep file's folder
    overrides: [train.epochs=2, data.validation_split=0.1]   # dotted overrides applied to every trial
    space:                            # dotted config keys and what each may be
      train.lr: {values: [1.0e-3, 3.0e-3]}            # a list to choose from (a grid's axis)
      head.dropout: {low: 0.1, high: 0.5}              # a range, drawn; optional log: true, or step: S
      model.num_filters: {low: 50, high: 200, step: 50}   # an integer option draws integers
    sampler: grid           # grid (every combination of `values`), tpe or random
    trials: 8               # the budget: trials that complete or are pruned (grid: default its size)
    metric: accuracy        # on the validation set; higher or lower is better as the task says
    seeds: [1, 2]           # each trial's setting trains once per seed (train.seed); its value is the mean
    prune: true             # median pruning, or {method: median|threshold, startup_trials, warmup_steps, threshold}
    sampler_seed: 0         # optional: seeds the sampler (and the grid's order)

A sweep selects on a validation set (data.validation, or data.validation_split of train): its recipe
must have one, or the sweep's overrides must add it. A setting chosen by its dev numbers would leave no
held-out evidence; each trial's dev set is evaluated once, on its kept weights, as any run's is.

The sweep folder (default runs/sweeps/<name>, `name:` or the sweep file's stem):

    study.db               the Optuna study (sqlite) unless --storage names another database
    sweep.json             every trial (state, value, params, runs) and the best one's `textnn train`
                           command: rewritten, atomically, after each trial
    trial-0003/seed-1/     the run of trial 3 at seed 1: a run directory like any other

Each trial runs once, whoever runs it: the budget is `trials` numbered slots, and a process runs a slot
only after it has inserted that slot's row into a table of the study's database (textnn_sweep_slots),
which one process alone can do (a primary key: atomic in sqlite as in PostgreSQL and MySQL). Optuna's
own queue pops a waiting trial by reading its state and then writing it, which two processes on sqlite
can both do at once. Slot k of a grid is its k-th point (in an order drawn with sampler_seed); of tpe
and random it is whatever the sampler draws. A row names its process (host, pid) and carries a heartbeat, renewed every
HEARTBEAT_SECONDS; a process that is gone (its pid no longer runs on this host, or its heartbeat is older
than STALE_SECONDS: the rule of run.json's `died`) loses its slot to the next process that looks. That
one marks the trial failed, and its half-written runs too, puts its params back in Optuna's queue
(`enqueue_trial`) and runs them, as a new trial. So a sweep killed at any point goes on where it was when
the same command runs again: finished trials are kept, never run again.

A trial whose training fails (a setting the config refuses, a loss that stays non-finite) is recorded as
failed and the sweep goes on; its slot is free again (the budget counts complete and pruned trials only),
for a later run of the sweep (a grid point is not tried twice by one process). After
MAX_FAILED_IN_A_ROW failures in a row the sweep stops with the last error.

Pruning: the first seed's run reports its metric at every validation evaluation (train.eval_every
steps, or each epoch) to the trial, and stops when the pruner says so (`Trainer.after_selection`); its
run.json then says `pruned`. The other seeds of a trial run only once the first has not been pruned,
and are not pruned themselves.

Optuna is an optional dependency (`pip install "textnn[sweep]"`), imported here only, when a sweep runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import random
import secrets
import shlex
import socket
import statistics
import sys
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from textnn import registry
from textnn.config import Config, check_run_name, coerce, is_int
from textnn.errors import TextnnError, clip, short
from textnn.experiment import COMPARE_IGNORED, CompareRow, run_row, train
from textnn.files import atomic_write_text, check_output_place, json_text, process_alive, read_yaml
from textnn.resolve import load_config
from textnn.runs import HEARTBEAT_SECONDS, STALE_SECONDS, RunDir, start_beating
from textnn.training.trainer import TrainingInterrupted

SWEEP_KEYS = ("name", "recipe", "overrides", "space", "sampler", "sampler_seed", "trials", "metric", "seeds", "prune")
SAMPLERS = ("grid", "tpe", "random")
RANGE_KEYS = ("low", "high", "log", "step")
PRUNE_KEYS = ("method", "startup_trials", "warmup_steps", "threshold")
# Options a sweep sets itself (seeds:, metric:) or that decide what trials are compared on: never searched.
NOT_SEARCHED = {"train.seed": "list the seeds in seeds: [...]", "train.metric": "name it in metric:",
                "data.validation": "the set trials are compared on is fixed: set it in overrides",
                "data.validation_split": "the set trials are compared on is fixed: set it in overrides",
                "name": "a trial's run directory is named by the sweep"}
MAX_FAILED_IN_A_ROW = 3
SLOTS_TABLE = "textnn_sweep_slots"
INSTALL = 'textnn sweep needs Optuna, an optional dependency: pip install "textnn[sweep]"'


def _optuna():
    """Optuna, imported on first use; without it, the one line that says how to install it."""
    try:
        import optuna
    except ImportError:
        raise TextnnError(INSTALL) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # each trial's line is ours
    return optuna


# ------------------------------------------------------------------------------------------ the sweep file

@dataclass(frozen=True)
class Param:
    """One searched option: `values` to choose from, or a range [low, high] (`log` scale, or a `step`)."""

    key: str
    values: tuple | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    integer: bool = False  # the option is an integer: the range draws integers

    def suggest(self, trial):
        """The value `trial` (an optuna.Trial) takes for this option: drawn, or fixed by its queue entry."""
        if self.values is not None:
            return trial.suggest_categorical(self.key, list(self.values))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)


@dataclass(frozen=True)
class Pruning:
    method: str  # median (Optuna's MedianPruner) or threshold (ThresholdPruner)
    startup_trials: int = 5  # median: trials that finish before any is pruned
    warmup_steps: int = 0  # steps of a run before it may be pruned
    threshold: float | None = None  # threshold: a value worse than this is pruned

    def pruner(self, higher_is_better: bool):
        optuna = _optuna()
        if self.method == "median":
            return optuna.pruners.MedianPruner(n_startup_trials=self.startup_trials, n_warmup_steps=self.warmup_steps)
        bound = {"lower" if higher_is_better else "upper": self.threshold}
        return optuna.pruners.ThresholdPruner(**bound, n_warmup_steps=self.warmup_steps)


@dataclass
class Sweep:
    """A sweep file, checked (`load_sweep`)."""

    path: Path
    name: str
    recipe: Path  # resolved: relative to the sweep file's folder
    overrides: list[str]  # applied to every trial (with train.metric=METRIC where the recipe names another)
    space: list[Param]
    sampler: str
    sampler_seed: int | None
    trials: int
    metric: str
    higher_is_better: bool
    seeds: list[int]
    prune: Pruning | None
    base: dict = field(repr=False)  # the recipe with the overrides, flattened: what every trial shares

    @property
    def direction(self) -> str:
        return "maximize" if self.higher_is_better else "minimize"

    def grid(self) -> list[dict]:
        """Every combination of the values (grid sampler), in an order drawn with sampler_seed (0 if unset):
        slot k runs the k-th, so a budget under the grid's size covers all of it evenly."""
        keys = [param.key for param in self.space]
        points = [dict(zip(keys, values)) for values in itertools.product(*(param.values for param in self.space))]
        random.Random(self.sampler_seed or 0).shuffle(points)
        return points

    def grid_size(self) -> int:
        return math.prod(len(param.values) for param in self.space) if self.sampler == "grid" else 0

    def overrides_for(self, params: dict, seed: int) -> list[str]:
        return [*self.overrides, *(f"{key}={_text(value)}" for key, value in params.items()), f"train.seed={seed}"]

    def config(self, params: dict, seed: int) -> Config:
        return load_config(self.recipe, self.overrides_for(params, seed), given_in=str(self.path))

    def command(self, params: dict, seed: int) -> str:
        """The `textnn train` command that trains this setting at `seed` as the sweep did."""
        words = ["textnn", "train", _shown_path(self.recipe), *self.overrides_for(params, seed)]
        return " ".join(shlex.quote(word) for word in words)

    def definition(self) -> dict:
        """What a study's trials share, kept in the study (a second process, or a later run, must agree): a grid's
        points in their order too, since slot k runs the k-th."""
        return json.loads(json_text({"space": [dataclasses.asdict(param) for param in self.space],
                                     "sampler": self.sampler, "grid": self.grid() if self.sampler == "grid" else None,
                                     "metric": self.metric, "direction": self.direction, "seeds": self.seeds,
                                     "config": self.base}))


def load_sweep(path: str | Path, trials: int | None = None) -> Sweep:
    """Read and check a sweep file; `trials` (--trials) replaces its budget. Every error is one line naming
    the file and the key."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TextnnError(f"{path}: sweep file not found; check the path")
    raw = read_yaml(path)
    where = str(path)
    for key in raw:
        if key not in SWEEP_KEYS:
            raise TextnnError(f"{where}: {registry.unknown_name('key', str(key), SWEEP_KEYS)}")
    name = check_run_name(raw.get("name") or path.stem, f"{where}: name")
    recipe = _recipe(raw.get("recipe"), path)
    overrides = _strings(raw.get("overrides", []), where, "overrides", "dotted overrides such as [train.epochs=2]")
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key in ("train.seed", "train.metric"):
            raise TextnnError(f"{where}: overrides: {key} is the sweep's own: {NOT_SEARCHED[key]}")
    base = load_config(recipe, overrides, given_in=f"{where}: overrides")
    if not (base.data.validation or base.data.validation_split):
        raise TextnnError(f"{where}: the recipe {recipe} selects on data.dev, and a setting chosen by its dev numbers "
                          f"leaves no held-out evidence on dev; add data.validation_split=0.1 to the sweep's overrides "
                          f"(a seeded share of train to select on; or data.validation=FILE)")
    for split in ("train", "validation", "dev", "test"):  # before trials fail one by one on a missing file
        given = getattr(base.data, split)
        if given and not base.data.files(given):
            raise TextnnError(f"{where}: data.{split} {given} of the recipe is not there; a recipe's data paths are "
                              f"read from the working folder ({Path.cwd()}): run the sweep from where the recipe "
                              f"is run (recipes/: the repository root)")
    task = registry.task_class(base.task)
    metric = raw.get("metric", base.train.metric)
    if not isinstance(metric, str) or metric not in task.metrics_for(base):
        choices = ", ".join(task.metrics_for(base))
        given = "is missing" if not metric else f"{short(metric, 40)} is not one task {base.task} reports"
        raise TextnnError(f"{where}: metric {given}; name the validation metric to optimize: one of {choices}")
    if metric != base.train.metric:
        overrides.append(f"train.metric={metric}")  # the runs keep their best weights by the sweep's metric
    seeds = raw.get("seeds", [base.train.seed])
    if not isinstance(seeds, list) or not seeds or not all(is_int(s) and 0 <= s < 2 ** 32 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise TextnnError(f"{where}: seeds: got {short(seeds)}, expected a list of distinct integers in "
                          f"[0, {2 ** 32 - 1}], e.g. [1, 2, 3]")
    space = _space(raw.get("space"), where, recipe, overrides, base)
    sampler = raw.get("sampler", "grid" if all(param.values is not None for param in space) else "tpe")
    if sampler not in SAMPLERS:
        raise TextnnError(f"{where}: sampler: got {short(sampler)}, expected one of {', '.join(SAMPLERS)}")
    ranged = [param.key for param in space if param.values is None]
    if sampler == "grid" and ranged:
        raise TextnnError(f"{where}: sampler grid takes lists only, and space {ranged[0]} is a range; give it "
                          f"values: [...], or use sampler: tpe or random")
    sampler_seed = raw.get("sampler_seed")
    if sampler_seed is not None and not (is_int(sampler_seed) and 0 <= sampler_seed < 2 ** 32):
        raise TextnnError(f"{where}: sampler_seed: got {short(sampler_seed)}, expected an integer in "
                          f"[0, {2 ** 32 - 1}]")
    sweep = Sweep(path=path, name=name, recipe=recipe, overrides=overrides, space=space, sampler=sampler,
                  sampler_seed=sampler_seed, trials=0, metric=metric, higher_is_better=task.metric_directions[metric],
                  seeds=list(seeds), prune=_pruning(raw.get("prune", False), where),
                  base=_shared_options(base, {param.key for param in space}))
    sweep.trials = _budget(trials if trials is not None else raw.get("trials"), sweep, trials is not None)
    return sweep


def _recipe(value: object, sweep_file: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise TextnnError(f"{sweep_file}: recipe: {'missing' if value is None else 'got ' + short(value)}; name the "
                          f"config every trial starts from, e.g. recipe: ../sst2_cnn_rand.yaml (relative to the sweep "
                          f"file's folder)")
    recipe = sweep_file.parent / Path(value).expanduser()
    if not recipe.is_file():
        raise TextnnError(f"{sweep_file}: recipe: {recipe} not found (a recipe is read relative to the sweep file's "
                          f"folder, {sweep_file.parent}); check the path")
    return recipe


def _strings(value: object, where: str, key: str, expected: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and "=" in item for item in value):
        raise TextnnError(f"{where}: {key}: got {short(value)}, expected a list of {expected}")
    return list(value)


def _space(raw: object, where: str, recipe: Path, overrides: list[str], base: Config) -> list[Param]:
    if not isinstance(raw, dict) or not raw:
        raise TextnnError(f"{where}: space: {'missing' if raw is None else 'got ' + short(raw)}; give the options to "
                          f"search, e.g. space: {{train.lr: {{values: [0.001, 0.003]}}}}")
    fixed = {item.split("=", 1)[0].strip() for item in overrides}
    return [_param(str(key), entry, f"{where}: space {clip(key)}", recipe, overrides, base, fixed)
            for key, entry in raw.items()]


def _param(key: str, entry: object, where: str, recipe: Path, overrides: list[str], base: Config,
           fixed: set[str]) -> Param:
    if key in NOT_SEARCHED:
        raise TextnnError(f"{where}: not searched: {NOT_SEARCHED[key]}")
    if key in fixed:
        raise TextnnError(f"{where}: also set in overrides; keep one of them")
    if not isinstance(entry, dict) or ("values" in entry) == ("low" in entry or "high" in entry):
        raise TextnnError(f"{where}: got {short(entry)}, expected {{values: [...]}} or {{low: L, high: H}} "
                          f"(with log: true or step: S)")
    for name in entry:
        valid = ("values",) if "values" in entry else RANGE_KEYS
        if name not in valid:
            raise TextnnError(f"{where}: {registry.unknown_name('key', str(name), valid)}")
    if "values" in entry:
        values = entry["values"]
        if not isinstance(values, list) or not values or not all(
                isinstance(v, (str, int, float, bool)) for v in values):
            raise TextnnError(f"{where}: values: got {short(values)}, expected a list of single values "
                              f"(numbers, words, true/false)")
        _check_value(key, values[0], where, recipe, overrides)  # an unknown key is named here, with "did you mean"
        kind = _option_type(base, key)
        if kind in (int, float, bool, str):
            values = [coerce(v, kind, key, where) for v in values]
        repeated = [v for v in values if values.count(v) > 1]
        if repeated:
            raise TextnnError(f"{where}: values: {short(repeated[0])} is given twice; list each value once")
        for value in values:
            _check_value(key, value, where, recipe, overrides)
        return Param(key=key, values=tuple(values))
    if "low" not in entry or "high" not in entry:
        raise TextnnError(f"{where}: a range needs both low and high")
    kind = _option_type(base, key)
    if kind not in (int, float):
        if kind is None:  # an unknown key is named here, with "did you mean"
            _check_value(key, entry["low"], where, recipe, overrides)
        shown = getattr(kind, "__name__", str(kind)) if kind is not None else "not a number"
        raise TextnnError(f"{where}: a range needs a number option, and {key} is {shown}; give values: [...]")
    low, high = (coerce(entry[name], kind, f"{key} {name}", where) for name in ("low", "high"))
    log = coerce(entry.get("log", False), bool, f"{key} log", where)
    step = coerce(entry["step"], kind, f"{key} step", where) if "step" in entry else None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise TextnnError(f"{where}: low {low} and high {high}: expected finite numbers with low < high")
    if log and low <= 0:
        raise TextnnError(f"{where}: log: true needs low > 0, got {low}")
    if step is not None:
        if log:
            raise TextnnError(f"{where}: log and step together: a log range cannot step evenly; keep one of them")
        steps = (high - low) / step if step > 0 else -1
        if step <= 0 or abs(steps - round(steps)) > 1e-9:
            raise TextnnError(f"{where}: step {step}: expected a number > 0 that divides high - low ({high - low})")
    for value in (low, high):
        _check_value(key, value, where, recipe, overrides)
    return Param(key=key, low=low, high=high, log=log, step=step, integer=kind is int)


def _check_value(key: str, value: object, where: str, recipe: Path, overrides: list[str]) -> None:
    """Refuse a value the config refuses (or a key it does not have), in one line naming the sweep file."""
    try:
        load_config(recipe, [*overrides, f"{key}={_text(value)}"], given_in=where)
    except TextnnError as err:
        if str(err).startswith(where):
            raise
        raise TextnnError(f"{where}: {short(value, 40)} is refused: {err}") from None


def _option_type(config: Config, key: str):
    """The declared type of a config option `section.name` (int, float, bool, str, ...); None for the keys
    that are no dataclass field (model.name, model.preset, task)."""
    section, _, name = key.partition(".")
    holder = {"data": config.data, "model": config.model, "head": config.head, "train": config.train}.get(section)
    if holder is None or name not in {f.name for f in dataclasses.fields(holder)}:
        return None
    return typing.get_type_hints(type(holder))[name]


def _pruning(raw: object, where: str) -> Pruning | None:
    if raw is False or raw is None:
        return None
    if raw is True:
        return Pruning("median")
    if not isinstance(raw, dict):
        raise TextnnError(f"{where}: prune: got {short(raw)}, expected true, false or {{method: median|threshold, "
                          f"startup_trials: N, warmup_steps: N, threshold: X}}")
    for key in raw:
        if key not in PRUNE_KEYS:
            raise TextnnError(f"{where}: prune: {registry.unknown_name('key', str(key), PRUNE_KEYS)}")
    method = raw.get("method", "median")
    if method not in ("median", "threshold"):
        raise TextnnError(f"{where}: prune: method: got {short(method)}, expected median or threshold")
    counts = {}
    defaults = {f.name: f.default for f in dataclasses.fields(Pruning)}
    for key in ("startup_trials", "warmup_steps"):
        value = raw.get(key, defaults[key])
        if not is_int(value) or value < 0:
            raise TextnnError(f"{where}: prune: {key}: got {short(value)}, expected an integer >= 0")
        counts[key] = value
    threshold = raw.get("threshold")
    if (method == "threshold") != (threshold is not None):
        raise TextnnError(f"{where}: prune: threshold: " + ("method threshold needs one, e.g. threshold: 0.6"
                                                            if threshold is None else "only with method: threshold"))
    if threshold is not None:
        threshold = coerce(threshold, float, "prune threshold", where)
    if method == "threshold" and "startup_trials" in raw:
        raise TextnnError(f"{where}: prune: startup_trials: only with method: median")
    return Pruning(method, threshold=threshold, **counts)


def _budget(trials: object, sweep: Sweep, from_command_line: bool) -> int:
    where = "--trials" if from_command_line else f"{sweep.path}: trials"
    size = sweep.grid_size()
    if trials is None:
        if size:
            return size
        raise TextnnError(f"{sweep.path}: trials: missing; a {sweep.sampler} sweep needs a budget (trials: N, or "
                          f"--trials N)")
    if not is_int(trials) or trials < 1:
        raise TextnnError(f"{where}: got {short(trials)}, expected an integer >= 1")
    if size and trials > size:
        raise TextnnError(f"{where}: {trials} is more than the grid's {size} points; each point runs once (give at "
                          f"most {size}, or use sampler: random to draw settings)")
    return trials


def _shared_options(config: Config, searched: set[str]) -> dict:
    """The recipe with the sweep's overrides, as `section.key: value`, but for what trials set themselves (the
    `searched` keys, the seed) and the options that change how a run is shown or where it computes
    (experiment.COMPARE_IGNORED)."""
    flat = {}
    for section, values in config.to_dict().items():
        flat.update({f"{section}.{key}": value for key, value in values.items()} if isinstance(values, dict)
                    else {section: values})
    return {key: value for key, value in flat.items() if key not in COMPARE_IGNORED | searched | {"name", "train.seed"}}


def _text(value: object) -> str:
    """A value as an override writes it, exactly (a float's repr reads back as the same float)."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def _shown_path(path: Path) -> str:
    """`path` as a command shows it: relative to the working folder when inside it."""
    path = path.resolve()
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd().resolve()))
    return str(path)


# ------------------------------------------------------------------------------------ slots: each trial once

class Slots:
    """The sweep's budget as numbered slots, each a row of a table in the study's database (see the module
    docstring): inserting a row claims its slot for this process, which alone can."""

    def __init__(self, url: str, engine_kwargs: dict, study: str):
        import sqlalchemy as sa

        self.sa, self.study = sa, study
        self.engine = sa.create_engine(url, **engine_kwargs)
        self.table = sa.Table(SLOTS_TABLE, sa.MetaData(),
                              sa.Column("study", sa.String(512), primary_key=True),
                              sa.Column("slot", sa.Integer, primary_key=True, autoincrement=False),
                              sa.Column("worker", sa.String(300), nullable=False),  # host:pid:token
                              sa.Column("heartbeat", sa.Float, nullable=False),
                              sa.Column("done", sa.Boolean, nullable=False))
        self.table.metadata.create_all(self.engine)  # if missing
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    def rows(self) -> dict[int, object]:
        t = self.table
        with self.engine.connect() as connection:
            return {row.slot: row for row in connection.execute(self.sa.select(t).where(t.c.study == self.study))}

    def take(self, budget: int, passed: set[int]) -> int | None:
        """The lowest slot below `budget` (and not in `passed`) that is free or held by a process that is gone,
        now this process's; None when every slot is done or held by a live process."""
        t = self.table
        rows = self.rows()
        for slot in range(budget):
            row = rows.get(slot)
            if slot in passed or (row is not None and (row.done or not _gone(row.worker, row.heartbeat))):
                continue
            now = time.time()
            if row is None:
                try:
                    with self.engine.begin() as connection:
                        connection.execute(self.sa.insert(t).values(study=self.study, slot=slot, worker=self.worker,
                                                                    heartbeat=now, done=False))
                except self.sa.exc.IntegrityError:  # another process took it first
                    continue
                return slot
            with self.engine.begin() as connection:  # taken over only from the process that held it
                taken = connection.execute(self.sa.update(t).where(
                    t.c.study == self.study, t.c.slot == slot, t.c.worker == row.worker, t.c.done.is_(False)).values(
                    worker=self.worker, heartbeat=now))
            if taken.rowcount == 1:
                return slot
        return None

    def finish(self, slot: int) -> None:
        """The slot's trial is complete or pruned: the slot counts in the budget for good."""
        t = self.table
        with self.engine.begin() as connection:
            connection.execute(self.sa.update(t).where(t.c.study == self.study, t.c.slot == slot,
                                                       t.c.worker == self.worker).values(done=True))

    def release(self, slot: int) -> None:
        """Give the slot back (its trial failed or was interrupted): the next process to look takes it."""
        t = self.table
        with self.engine.begin() as connection:
            connection.execute(self.sa.delete(t).where(t.c.study == self.study, t.c.slot == slot,
                                                       t.c.worker == self.worker))

    def start_heartbeat(self) -> Callable[[], None]:
        """Renew this process's heartbeat on its slots every HEARTBEAT_SECONDS, from a thread, until the
        function returned is called."""
        t = self.table

        def beat() -> None:
            with contextlib.suppress(self.sa.exc.SQLAlchemyError):  # a busy database: the next beat
                with self.engine.begin() as connection:
                    connection.execute(self.sa.update(t).where(
                        t.c.study == self.study, t.c.worker == self.worker, t.c.done.is_(False)).values(
                        heartbeat=time.time()))

        return start_beating(beat, HEARTBEAT_SECONDS, "textnn-sweep-heartbeat")


def _process_of(worker: str) -> str:
    """'process PID on HOST' of a slot's worker name (host:pid:token)."""
    parts = worker.rsplit(":", 2)
    return f"process {parts[1]} on {parts[0]}" if len(parts) == 3 else "process"


def _gone(worker: str, heartbeat: float) -> bool:
    """Whether the process that holds a slot is gone: its pid no longer runs on this host, or its heartbeat is
    older than STALE_SECONDS (on any host), the rule of run.json's `died` (RunDir.effective_status)."""
    host, pid, _ = worker.rsplit(":", 2)
    if host == socket.gethostname() and pid.isdigit() and not process_alive(int(pid)):
        return True
    return time.time() - heartbeat > STALE_SECONDS


# ------------------------------------------------------------------------------------------------ the study

@dataclass
class Study:
    """An open Optuna study with its storage and slots."""

    study: object  # optuna.Study
    storage: object  # optuna.storages.RDBStorage
    slots: Slots
    url: str  # as given, for opening; `shown` is what is printed
    own: bool = False  # the sweep folder's own study.db (no --storage)

    @property
    def id(self) -> int:
        return self.storage.get_study_id_from_name(self.study.study_name)

    @property
    def shown(self) -> str:
        return _redacted(self.url)

    def trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.id, number)

    def trial(self, number: int):
        """The study's trial `number` as it stands now (an optuna FrozenTrial)."""
        return self.storage.get_trial(self.trial_id(number))


def open_study(sweep: Sweep, url: str) -> Study:
    """The sweep's study in the database at `url` (made if new), checked to be this sweep's."""
    optuna = _optuna()
    try:
        storage, slots = _storage(url, sweep.name)
        study = optuna.create_study(storage=storage, study_name=sweep.name, direction=sweep.direction,
                                    load_if_exists=True, pruner=sweep.prune.pruner(sweep.higher_is_better)
                                    if sweep.prune else optuna.pruners.NopPruner())
    except Exception as err:  # SQLAlchemy's and the database driver's, whichever the URL names
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TextnnError(f"study storage {_redacted(url)}: cannot open it ({clip(first, 200)}); give --storage a "
                          f"database URL that Optuna reads, e.g. sqlite:///study.db or postgresql://user@host/db") \
            from None
    # A seeded sampler draws anew in each process: from the seed plus the trials made so far, so that a resumed
    # sweep does not draw its first settings again.
    made = len(study.get_trials(deepcopy=False))
    seed = None if sweep.sampler_seed is None else (sweep.sampler_seed + made) % 2 ** 32
    study.sampler = (optuna.samplers.TPESampler if sweep.sampler == "tpe" else optuna.samplers.RandomSampler)(seed=seed)
    _check_definition(study, sweep, url)
    return Study(study, storage, slots, url)


def _storage(url: str, name: str, tries: int = 3):
    """Optuna's RDBStorage at `url` and the sweep's Slots there. Processes that open a new database together
    may meet while its tables are made (one's insert then fails); the next try finds them made."""
    import sqlalchemy

    optuna = _optuna()
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(tries):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs), Slots(url, engine_kwargs, name)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError):
            if attempt == tries - 1:
                raise
            time.sleep(1 + attempt)


def _check_definition(study, sweep: Sweep, url: str) -> None:
    """Record the sweep in a new study; refuse a study another sweep made (or an edited recipe), naming what
    differs."""
    wanted = sweep.definition()
    recorded = study.user_attrs.get("textnn_sweep")
    if recorded is None:
        study.set_user_attr("textnn_sweep", wanted)
        return
    # the config's options one by one (the one that differs is named), then the sweep's own keys
    pairs = [(key, recorded.get("config", {}).get(key), value) for key, value in wanted.pop("config").items()]
    pairs += [(key, recorded.get(key), value) for key, value in wanted.items()]
    pairs += [(key, value, None) for key, value in recorded.get("config", {}).items() if key not in sweep.base]
    for key, before, now in pairs:
        if before == now:
            continue
        what = f"{key}: {short(before, 40)} -> {short(now, 40)}"
        raise TextnnError(f"{sweep.path}: the study '{sweep.name}' in {_redacted(url)} was made by another sweep "
                          f"or recipe ({what}); put the setting back, or start another study (another name:, "
                          f"--sweep-dir or --storage)")


def _redacted(url: str) -> str:
    """A database URL without its password."""
    with contextlib.suppress(Exception):
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    return url


# -------------------------------------------------------------------------------------------- the trials

@dataclass
class TrialRow:
    """One trial of the study, as the table, sweep.json and `compare --sweep` show it."""

    number: int
    state: str  # COMPLETE, PRUNED, FAIL, RUNNING or WAITING (Optuna's states)
    value: float | None  # the mean over seeds of each run's best validation value (pruned: the last reported)
    params: dict
    runs: list[str]  # run directories, as recorded (absolute)
    step: int | None = None  # pruned: the step of its last report
    note: str = ""  # why it failed


@dataclass
class SweepResult:
    sweep: Sweep
    folder: Path
    storage: str  # shown, without a password
    rows: list[TrialRow]  # best first (`ranked`)

    @property
    def best(self) -> TrialRow | None:
        return next((row for row in self.rows if row.state == "COMPLETE"), None)

    def count(self, state: str) -> int:
        return sum(row.state == state for row in self.rows)


def run_sweep(path: str | Path, sweep_dir: str | Path | None = None, storage: str | None = None,
              trials: int | None = None, on_trial: Callable[[str], None] | None = None) -> SweepResult:
    """Run (or go on with) the sweep of the sweep file at `path` until its budget is spent or every slot left is
    held by another live process; `on_trial` hears the line (`trial_line`) of each trial this process ends.
    Returns every trial of the study (this process's and others'), best first."""
    _optuna()  # not installed: said before anything else
    sweep = load_sweep(path, trials)
    folder = check_output_place(sweep_dir or Path("runs") / "sweeps" / sweep.name, "directory", "--sweep-dir")
    url = storage or f"sqlite:///{(folder / 'study.db').resolve()}"
    _check_folder(folder, sweep, storage)
    if storage is None:  # the study's database goes in the folder
        folder.mkdir(parents=True, exist_ok=True)
    opened = open_study(sweep, url)
    opened.own = storage is None
    folder.mkdir(parents=True, exist_ok=True)
    write_summary(opened, sweep, folder)
    passed: set[int] = set()  # grid slots whose trial failed in this process: not tried again by it
    failed_in_a_row = 0
    stop_beating = opened.slots.start_heartbeat()
    try:
        while (slot := opened.slots.take(sweep.trials, passed)) is not None:
            row = _run_slot(opened, sweep, folder, slot)
            if row is None:
                continue
            write_summary(opened, sweep, folder)
            if on_trial is not None:
                on_trial(trial_line(row, sweep.metric))
            failed_in_a_row = failed_in_a_row + 1 if row.state == "FAIL" else 0
            if row.state == "FAIL" and sweep.sampler == "grid":
                passed.add(slot)
            if failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                raise TextnnError(f"{failed_in_a_row} trials in a row failed, the last (trial {row.number}): "
                                  f"{row.note}; fix the cause and run the sweep again (failed trials run again)")
    finally:
        stop_beating()
    return write_summary(opened, sweep, folder)


def _check_folder(folder: Path, sweep: Sweep, storage: str | None) -> None:
    """A sweep folder holds the trials of one study: refuse another's (its sweep.json names it; storage None:
    the folder's own study.db)."""
    summary = folder / "sweep.json"
    if not summary.is_file():
        return
    try:
        info = json.loads(summary.read_text(encoding="utf-8"))
        recorded = (info["study"], info["storage"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise TextnnError(f"{summary}: damaged (not the summary textnn writes); it is rewritten from the study: "
                          f"delete it and run the sweep again") from None
    if recorded != (sweep.name, storage and _redacted(storage)):
        where = recorded[1] or f"{folder / 'study.db'} (without --storage)"
        raise TextnnError(f"{folder}: holds the trials of study '{recorded[0]}' in {where}; run it as it was run "
                          f"to go on with it, or give another --sweep-dir")


def _run_slot(opened: Study, sweep: Sweep, folder: Path, slot: int) -> TrialRow | None:
    """Run the trial of a slot this process now holds; its row, or None when the slot's trial had finished after
    all. Every trial is made knowing its slot (a user attr from its birth), so whatever a process that died
    holding the slot left is found: a trial it finished (the slot is done), one left running (failed, its
    setting put back in the queue), or a queued one (run now)."""
    optuna = _optuna()
    states = optuna.trial.TrialState
    trials = [trial for trial in opened.study.get_trials(deepcopy=False) if trial.user_attrs.get("slot") == slot]
    if any(trial.state in (states.COMPLETE, states.PRUNED) for trial in trials):  # it died after telling the study
        opened.slots.finish(slot)
        return None
    for trial in trials:
        if trial.state == states.RUNNING:
            reason = f"its sweep {_process_of(trial.user_attrs.get('worker', '?:?:?'))} died"
            _abandon(opened, sweep, trial, slot, reason)
            print(f"trial {trial.number}: {reason}; marked failed, its setting runs again as a new trial",
                  file=sys.stderr)
    ticket = _waiting(opened, slot)
    if ticket is None and sweep.sampler == "grid":
        opened.study.enqueue_trial(sweep.grid()[slot], user_attrs={"slot": slot})
        ticket = _waiting(opened, slot)
    if ticket is not None:  # its params are fixed: a grid point, or a setting put back in the queue
        trial_id = opened.trial_id(ticket.number)
        opened.storage.set_trial_state_values(trial_id, states.RUNNING)
    else:  # the sampler draws its params
        trial_id = opened.storage.create_new_trial(opened.id, template_trial=optuna.trial.create_trial(
            state=states.RUNNING, user_attrs={"slot": slot}))
    trial = optuna.Trial(opened.study, trial_id)
    params = {param.key: param.suggest(trial) for param in sweep.space}
    trial_dir = folder / f"trial-{trial.number:04d}"
    runs = [trial_dir / f"seed-{seed}" for seed in sweep.seeds]
    for key, value in (("worker", opened.slots.worker), ("runs", [str(run.resolve()) for run in runs])):
        trial.set_user_attr(key, value)
    try:
        values = []
        for index, (seed, run_dir) in enumerate(zip(sweep.seeds, runs)):
            _, result = train(sweep.config(params, seed), run_dir,
                              after_selection=_reporter(trial) if sweep.prune and index == 0 else None)
            if result.stopped == "pruned":
                opened.study.tell(trial, state=states.PRUNED)
                opened.slots.finish(slot)
                return row_of(opened.trial(trial.number))
            if result.best_metric is None or not math.isfinite(result.best_metric):
                raise TextnnError(f"{run_dir}: no finite validation {sweep.metric} (the loss diverged?)")
            values.append(result.best_metric)
        trial.set_user_attr("seed_values", values)
        opened.study.tell(trial, statistics.fmean(values))
        opened.slots.finish(slot)
    except TextnnError as err:  # the setting failed: recorded, and the sweep goes on
        trial.set_user_attr("error", clip(str(err), 500))
        opened.study.tell(trial, state=states.FAIL)
        opened.slots.release(slot)
    except TrainingInterrupted as err:
        _abandon(opened, sweep, opened.trial(trial.number), slot, "interrupted")
        opened.slots.release(slot)
        raise TrainingInterrupted(f"sweep interrupted in trial {trial.number}; run the same `textnn sweep` command "
                                  f"again to go on: the trial's setting runs again, as a new trial",
                                  err.signal_number) from None
    except BaseException:  # Ctrl-C outside training, or an error of textnn's own: the setting is put back
        with contextlib.suppress(Exception):
            _abandon(opened, sweep, opened.trial(trial.number), slot, "stopped by an error or Ctrl-C")
            opened.slots.release(slot)
        raise
    return row_of(opened.trial(trial.number))


def _reporter(trial) -> Callable[[int, float], bool]:
    """The trainer's `after_selection` for a trial: report each validation value, and stop if it is pruned."""
    def after_selection(step: int, value: float) -> bool:
        trial.report(value, step)
        return trial.should_prune()
    return after_selection


def _waiting(opened: Study, slot: int):
    """The queued (WAITING) trial of `slot`, if there is one."""
    states = _optuna().trial.TrialState
    waiting = opened.study.get_trials(deepcopy=False, states=(states.WAITING,))
    return next((trial for trial in waiting if trial.user_attrs.get("slot") == slot), None)


def _abandon(opened: Study, sweep: Sweep, trial, slot: int, reason: str) -> None:
    """Mark a trial that will not finish failed (and its runs that were left running), and put its params back
    in the queue for `slot`, unless its setting failed by itself or a queued trial of the slot is there."""
    optuna = _optuna()
    states = optuna.trial.TrialState
    trial_id = opened.trial_id(trial.number)
    if trial.state in (states.RUNNING, states.WAITING):
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            opened.storage.set_trial_user_attr(trial_id, "failed", reason)
            opened.storage.set_trial_state_values(trial_id, states.FAIL)
        for path in trial.user_attrs.get("runs", []):
            run = RunDir(path)
            with contextlib.suppress(TextnnError, OSError):
                if run.status_file.is_file() and run.effective_status() == "died":
                    run.set_status("failed", error=f"sweep {sweep.name}: trial {trial.number} {reason}; its setting "
                                                   f"runs again as a new trial")
    complete = all(param.key in trial.params for param in sweep.space)
    if complete and "error" not in trial.user_attrs and _waiting(opened, slot) is None:
        opened.study.enqueue_trial(dict(trial.params), user_attrs={"slot": slot, "retry_of": trial.number})


def row_of(trial) -> TrialRow:
    """The TrialRow of an Optuna FrozenTrial."""
    note = trial.user_attrs.get("error") or trial.user_attrs.get("failed") or ""
    return TrialRow(number=trial.number, state=trial.state.name, value=trial.value, params=dict(trial.params),
                    runs=list(trial.user_attrs.get("runs", [])), step=trial.last_step if trial.state.name == "PRUNED"
                    else None, note=note)


STATE_ORDER = ("COMPLETE", "PRUNED", "RUNNING", "WAITING", "FAIL")


def ranked(rows: list[TrialRow], higher_is_better: bool) -> list[TrialRow]:
    """Complete trials best first, then pruned ones (by the value they were pruned at), then running, waiting
    and failed ones; trials of one state and value by number."""
    def key(row: TrialRow):
        state = STATE_ORDER.index(row.state) if row.state in STATE_ORDER else len(STATE_ORDER)
        valued = row.state in ("COMPLETE", "PRUNED") and row.value is not None and math.isfinite(row.value)
        worth = (-row.value if higher_is_better else row.value) if valued else math.inf
        return state, worth, row.number

    return sorted(rows, key=key)


# ------------------------------------------------------------------------------------------ what is shown

def write_summary(opened: Study, sweep: Sweep, folder: Path) -> SweepResult:
    """sweep.json from the study (every process's trials), written atomically; returns what it holds."""
    rows = ranked([row_of(trial) for trial in opened.study.get_trials(deepcopy=False)], sweep.higher_is_better)
    result = SweepResult(sweep=sweep, folder=folder, storage=opened.shown, rows=rows)
    best = result.best
    summary = {
        "name": sweep.name, "sweep_file": str(sweep.path), "recipe": str(sweep.recipe), "study": sweep.name,
        "storage": None if opened.own else opened.shown, "metric": sweep.metric, "direction": sweep.direction,
        "selected_on": "validation",
        "seeds": sweep.seeds, "sampler": sweep.sampler, "trials": sweep.trials,
        "complete": result.count("COMPLETE"), "pruned": result.count("PRUNED"), "failed": result.count("FAIL"),
        "best": None if best is None else {"trial": best.number, "value": best.value, "params": best.params,
                                           "command": sweep.command(best.params, sweep.seeds[0])},
        "ranking": [{"trial": row.number, "state": row.state, "value": row.value, "params": row.params,
                     "runs": [_under(folder, run) for run in row.runs],
                     **({"step": row.step} if row.step is not None else {}), **({"note": row.note} if row.note else {})}
                    for row in rows],
    }
    atomic_write_text(folder / "sweep.json", json_text(summary, indent=2) + "\n")
    return result


def _under(folder: Path, path: str) -> str:
    """A run's path relative to the sweep folder when inside it (sweep.json moves with its folder)."""
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(folder.resolve()))
    return path


def _shown_value(value: object) -> str:
    return format(value, ".4g") if isinstance(value, float) else str(value)


def _shown_params(params: dict) -> str:
    return " ".join(f"{key}={_shown_value(value)}" for key, value in params.items())


def trial_line(row: TrialRow, metric: str) -> str:
    """The line printed as a trial ends: number, state, value, params."""
    value = f"{metric} {row.value:.4f}" if row.value is not None else f"{metric} -"
    at = f" at step {row.step}" if row.step is not None else ""
    note = f"  ({row.note})" if row.note else ""
    return f"trial {row.number}  {row.state}  {value}{at}  {_shown_params(row.params)}{note}"


def summary_lines(result: SweepResult) -> list[str]:
    """The table of every trial (best first) and the best trial's params with its `textnn train` command."""
    sweep = result.sweep
    keys = [param.key for param in sweep.space]
    header = ["trial", "state", f"validation {sweep.metric}", *keys]
    body = [[str(row.number), row.state + (f" at step {row.step}" if row.step is not None else ""),
             f"{row.value:.4f}" if row.value is not None else "-",
             *(_shown_value(row.params[key]) if key in row.params else "-" for key in keys)] for row in result.rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *body)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *body]]
    done, running = result.count("COMPLETE") + result.count("PRUNED"), result.count("RUNNING")
    lines.append(f"{done} of {sweep.trials} trials done ({result.count('COMPLETE')} complete, {result.count('PRUNED')} "
                 f"pruned), {result.count('FAIL')} failed"
                 + (f", {running} marked running by another process" if running else "")
                 + f"; study {sweep.name} in {result.storage}; runs in {result.folder}")
    best = result.best
    if best is None:
        return lines
    seeds = f"mean over seeds {', '.join(map(str, sweep.seeds))}" if len(sweep.seeds) > 1 else f"seed {sweep.seeds[0]}"
    best_label = "best so far" if running else "best"
    lines += [f"{best_label}: trial {best.number}, validation {sweep.metric} {best.value:.4f} ({seeds}): "
              f"{_shown_params(best.params)}",
              f"reproduce: {sweep.command(best.params, sweep.seeds[0])}"]
    return lines


# ------------------------------------------------------------------------------------- textnn compare --sweep

def compare_sweep(folder: str | Path, top: int = 5) -> list[CompareRow]:
    """`textnn compare --sweep DIR`: the `top` complete trials of a sweep (by their validation value, from its
    sweep.json), each with its dev numbers (evaluated once, on each run's kept weights; the mean over its
    seeds). Needs no Optuna."""
    folder = Path(folder)
    summary = folder / "sweep.json"
    if not summary.is_file():
        raise TextnnError(f"{folder}: not a sweep folder (no sweep.json); give the folder `textnn sweep` wrote "
                          f"(runs/sweeps/<sweep name> unless --sweep-dir was set)")
    try:
        info = json.loads(summary.read_text(encoding="utf-8"))
        trials = [t for t in info["ranking"] if t["state"] == "COMPLETE"][:top]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise TextnnError(f"{summary}: damaged (not the summary textnn writes); run the sweep again to rewrite it") \
            from None
    rows = []
    for trial in trials:
        runs = [folder / run for run in trial["runs"]]
        present = [run for run in runs if (run / "run.json").is_file()]
        if not present:
            raise TextnnError(f"{runs[0] if runs else folder}: trial {trial['trial']}'s run is not here (a process "
                              f"on another machine may have run it); compare the sweep folder there")
        seeds = [run_row(RunDir(run)) for run in present]
        first = seeds[0]
        rows.append(dataclasses.replace(
            first, name=f"trial {trial['trial']}", value=statistics.fmean(row.value for row in seeds),
            ci_low=first.ci_low if len(seeds) == 1 else None, ci_high=first.ci_high if len(seeds) == 1 else None,
            train_seconds=sum(row.train_seconds for row in seeds),
            examples_per_second=statistics.fmean(row.examples_per_second for row in seeds),
            validation=trial["value"], params=_shown_params(trial["params"])))
    if not rows:
        raise TextnnError(f"{folder}: no trial of the sweep has completed yet")
    return rows
