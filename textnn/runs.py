"""The run directory: the one artifact a user keeps.

    runs/<name>/
      config.yaml            fully resolved config
      run.json               status (running / finished / pruned / interrupted / failed) and summary numbers
                             (pruned: a sweep gave up on the run after a validation evaluation, textnn/sweep.py);
                             while running also the pid and host of the training process and a
                             heartbeat (the time of the last sign of life, rewritten every
                             HEARTBEAT_SECONDS), so that a run whose process died shows as `died`;
                             and the fingerprints of its data files, which --resume checks
                             (data/fingerprint.py)
      model.safetensors      best weights (by the metric on dev, or on validation: run.json `selected_on`),
                             written atomically
      vocab.json, labels.json, tokenizer.json   whatever the task needs to rebuild its inputs
      checkpoint/last.safetensors              resumable state (training/checkpoint.py); removed once the
                                               run has finished, unless train.keep_checkpoint=last or all
      checkpoint/step-NNNNNN.safetensors       train.keep_checkpoint=all: every checkpoint written, by step
      metrics.jsonl          one JSON record per log/eval event
      report.md, *.png       the human report
      .lock                  while a `textnn train` writes the run: its pid and host (RunDir.lock; one
                             left by a killed process is free, and taken over)
      tensorboard/           train.tensorboard: TensorBoard's event files

A run's files and folders are its own: a symbolic link in the place of `.lock`, `checkpoint/` or
`tensorboard/` is refused (textnn would write through it, and removes checkpoint/), and every file is
written by replace (files.open_output), which replaces a link rather than writing through it.

Every command other than `train` takes a run directory and rebuilds task and model from it.

This module sits below the models and tasks, so it reads a run's config.yaml as saved (`raw_config`) and
its train section (`train_config`), never resolved into a family's and a task's options: that is
textnn/resolve.py `run_config`, and the checks here that compare the whole config take it as `saved`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import stat
import threading
import time
import unicodedata
from pathlib import Path
from typing import Callable

from textnn.config import Config, TrainConfig, WordVectorData, build_train
from textnn.data import fingerprint as fingerprints
from textnn.errors import TextnnError, clip
from textnn.files import atomic_write_text, process_alive, read_yaml, remove_stale_temporaries, unwritable

# train options that may differ on --resume: they bound or display the run, they do not change it, but for
# precision, a switch that run.json records as a new leg (training/precision.py `for_resumed_leg`).
# (A new budget may still be refused: training/budget.check_resume_budget.)
RESUMABLE_CHANGES = {"epochs", "max_steps", "max_minutes", "progress", "device", "threads", "tensorboard",
                     "keep_checkpoint", "precision"}
# sections of a saved config.yaml (Config.to_yaml writes them all)
SAVED_SECTIONS = ("task", "data", "model", "head", "train")
# metrics.jsonl splits written once, at the end of a run, from the best weights.
FINAL_SPLITS = ("dev_final", "test")
# A running run rewrites its heartbeat this often (from a thread, so also during a long evaluation); one
# that has not for STALE_SECONDS has died, or hangs, wherever it ran.
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0
# Statuses of a run whose training ended by itself (not killed or interrupted): its weights are final.
ENDED = ("finished", "pruned")
# run.json's fields that `textnn runs` lists, and the types textnn writes them as.
LISTED_TYPES = {"status": str, "metric": str, "best": (int, float), "steps": int}


def start_beating(beat: Callable[[], None], every: float, name: str) -> Callable[[], None]:
    """Call `beat` every `every` seconds from a daemon thread called `name` (a heartbeat: a sign of life
    that goes on during a long step or evaluation), until the function returned is called; that
    function waits for the thread to end."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            beat()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()

    def stop_beating() -> None:
        stop.set()
        thread.join()

    return stop_beating


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()  # the heartbeat thread and the trainer both rewrite run.json
        self._writer = None  # the open lock file while this process is the run's writer (`lock`)
        self._made = False  # whether `lock` made the directory (`unlock` removes it if nothing else came)
        # Also called with every metrics record once written (the trainer's TensorBoard log, if any).
        self.on_record: Callable[[dict], None] | None = None

    config_file = property(lambda self: self.path / "config.yaml")
    status_file = property(lambda self: self.path / "run.json")
    weights_file = property(lambda self: self.path / "model.safetensors")
    checkpoint_file = property(lambda self: self.path / "checkpoint" / "last.safetensors")
    metrics_file = property(lambda self: self.path / "metrics.jsonl")
    lock_file = property(lambda self: self.path / ".lock")
    tensorboard_dir = property(lambda self: self.path / "tensorboard")

    def lock(self) -> bool:
        """Become the one process that writes this run, until `unlock`; returns whether the directory was made.

        Two trainings of one run would write over each other's checkpoints and metrics. An flock on the lock
        file decides which one writes: taken atomically (two fresh trainings racing for one --run-dir meet on
        it, so the directory is made here), and dropped by the kernel when its process ends however it ends,
        so a killed trainer's lock never blocks a resume. The file holds the pid and host for the message
        the second one gets; a refused process changes nothing in the run.
        """
        if self.path.exists() and not self.path.is_dir():
            raise TextnnError(f"{self.path}: --run-dir names an existing file, not a directory; choose another --run-dir")
        made = not self.path.exists()
        while True:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                # O_NOFOLLOW: a link in its place would have the file it names cut and filled with our pid.
                handle = open(os.open(self.lock_file, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644),
                              "a+", encoding="utf-8")
            except OSError as err:
                raise unwritable(err.filename or self.path, err, "lock file") from None
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # a FIFO or a device made in its place
                handle.close()
                raise TextnnError(f"{self.lock_file}: not a plain file; remove it (a run's lock file is written "
                                  f"only as a plain file)")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise self._held_error() from None
            if _same_file(handle, self.lock_file):
                break
            handle.close()  # its last holder removed it as we opened it: take the one there now
        handle.truncate(0)
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
        handle.flush()
        self._writer, self._made = handle, made
        return made

    def unlock(self) -> None:
        """Stop being the run's writer (nothing if this process is not): the lock file goes, and the directory
        too if `lock` made it and nothing was written into it."""
        if self._writer is None:
            return
        with contextlib.suppress(OSError):
            self.lock_file.unlink()  # while still holding it: see `lock` for one that opened it meanwhile
        self._writer.close()
        self._writer = None
        if self._made:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only if empty

    def check_resume(self, config: Config, saved: Callable[[], Config]) -> None:
        """Refuse to continue the run here with `config` unless it has a checkpoint and the same config,
        but for the options that may change (RESUMABLE_CHANGES), and no process trains it now. `saved` reads
        the run's own config (resolve.run_config), once the run is known to have something to resume."""
        self.check_not_live()
        status = self.effective_status()
        if not self.checkpoint_file.is_file() and status in ENDED:
            ended = "finished" if status == "finished" else "was pruned"
            raise TextnnError(f"{self.path}: the run {ended} and its checkpoint was removed (train.keep_checkpoint="
                              f"none), so it cannot continue; train a new run, or start one from its weights "
                              f"with model.init_from={self.path}")
        if not self.checkpoint_file.is_file():
            raise TextnnError(f"{self.path}: nothing to resume (no checkpoint/last.safetensors); "
                              f"run without --resume")
        self.status()  # a damaged run.json is refused now, not at the first status update mid-run
        for key, before, wanted in changed_options(saved(), config):
            section, _, name = key.partition(".")
            if not (section == "train" and name in RESUMABLE_CHANGES):
                allowed = ", ".join(f"train.{name}" for name in sorted(RESUMABLE_CHANGES))
                raise TextnnError(f"{self.config_file}: cannot resume with {key}={wanted!r} (the run was started "
                                  f"with {before!r}; a resumed run keeps its settings, but for {allowed}); train "
                                  f"into a new --run-dir, from these weights if you like: model.init_from={self.path}")
        self.check_data_files(config)

    def check_data_files(self, config: Config) -> None:
        """Refuse to continue the run on data files other than those it started with (their fingerprints in
        run.json; a run started before they were recorded is not checked)."""
        recorded = self.status().get("data_files", {})
        for key, (path, files) in data_files(config).items():
            if key not in recorded:
                continue
            changed = fingerprints.change(path, files, recorded[key])
            if changed:
                file, what = changed
                raise TextnnError(f"{file} ({key}) changed since the run started: {what}; the resumed steps "
                                  f"would train on other data than the checkpoint's. Put the file back as it was, "
                                  f"or train a new run from these weights (model.init_from={self.path})")

    def check_not_live(self) -> None:
        """Refuse to touch a run that a live process is training (two trainers would write over each other)."""
        if self.effective_status() == "running":
            info = self.status()
            raise TextnnError(f"{self.path}: the run is still training (process {info.get('pid')} on "
                              f"{info.get('host')}); stop it first (Ctrl-C, or kill {info.get('pid')})")

    def starts_over(self) -> bool:
        """Whether `--resume` must start this run over: it stopped (killed, interrupted, failed) before
        writing its first checkpoint, so there is nothing to continue, and nothing to lose either.
        Never a finished (or pruned) run (whose checkpoint may have been deleted to save space: its weights stay)."""
        return (self.config_file.is_file() and not self.checkpoint_file.is_file() and not self.step_checkpoints()
                and self.effective_status() not in ENDED)

    def step_checkpoints(self) -> list[Path]:
        """The checkpoints train.keep_checkpoint=all kept by step (checkpoint/step-NNNNNN.safetensors), oldest
        first."""
        folder = self.checkpoint_file.parent
        return sorted(folder.glob("step-*.safetensors")) if folder.is_dir() and not folder.is_symlink() else []

    def create(self, config: Config, resume: bool, start_over: bool = False,
               saved: Callable[[], Config] | None = None) -> None:
        """Make the directory for a new run, or check that `config` may continue the one here (`saved`, with
        `resume`: reads the run's own config, as for `check_resume`).

        `start_over` (see `starts_over`): the files of the attempt that stopped before its first
        checkpoint are removed and the run starts afresh in the same directory.
        """
        for folder in (self.checkpoint_file.parent, self.tensorboard_dir):  # written into (and removed) below
            if folder.is_symlink():
                raise TextnnError(f"{folder}: a symbolic link (to {os.readlink(folder)}) stands in the place of the "
                                  f"run's own folder, which training writes into; remove the link (move what it "
                                  f"points to into the run as a folder of that name to keep it)")
        if resume:
            if saved is None:
                raise ValueError("RunDir.create(resume=True) needs `saved`, the run's own config")
            self.check_resume(config, saved)
        elif start_over:
            self.check_not_live()
            for stale in (self.status_file, self.metrics_file, self.weights_file, self.path / "report.md"):
                stale.unlink(missing_ok=True)
        else:
            self.check_fresh()
        for folder in (self.path, self.checkpoint_file.parent):  # a killed writer's full-size half-written files
            remove_stale_temporaries(folder)
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config_file, config.to_yaml())
        if "data_files" not in self.status():  # a new run (or one started before they were recorded)
            self.record(data_files={key: fingerprints.fingerprint(files) for key, (_, files) in data_files(config).items()})

    def _held_error(self) -> TextnnError:
        """The error for a run whose lock another process holds, naming that process."""
        pid, host = "?", "?"
        with contextlib.suppress(OSError):
            pid, host = _holder(self.lock_file.read_text(encoding="utf-8", errors="replace"))
        return TextnnError(f"{self.path}: another `textnn train` is writing this run (process {pid} on {host}); "
                           f"wait for it to end or stop it (kill {pid}), or choose another --run-dir")

    def _check_no_writer(self) -> None:
        """Refuse, naming it, a run that another process is writing now (it holds the lock); reads only."""
        if self._writer is not None:  # the lock is this process's own
            return
        try:
            handle = os.open(self.lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # no lock file (or not one to read): nobody writes the run
            return
        try:
            if stat.S_ISREG(os.fstat(handle).st_mode):
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._held_error() from None
        finally:
            os.close(handle)  # a shared lock taken here goes with it

    def check_fresh(self) -> None:
        """Refuse a new run into a directory that already holds something (`train` asks before it reads any
        data, and again as it makes the run); a run that another process is writing is named as such."""
        self._check_no_writer()
        if self.path.is_dir() and any(p != self.lock_file for p in self.path.iterdir()):
            raise TextnnError(f"{self.path}: run directory already exists and is not empty; pass --resume to "
                              f"continue it, --run-dir to choose another, or delete it")

    def remove_checkpoint(self) -> int:
        """Delete checkpoint/ (train.keep_checkpoint=none, once the run has finished); returns the bytes freed."""
        folder = self.checkpoint_file.parent
        size = lambda: sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())  # noqa: E731
        before = size() if folder.is_dir() else 0
        shutil.rmtree(folder, ignore_errors=True)  # what cannot be removed only costs space
        return before - (size() if folder.is_dir() else 0)

    def train_config(self) -> TrainConfig:
        """The train section of config.yaml (the rest needs resolving: resolve.run_config)."""
        return build_train(self.raw_config().get("train"), str(self.config_file))

    def raw_config(self) -> dict:
        """config.yaml as saved, unresolved: what a look at many runs (`textnn runs`) reads, since resolving
        a config imports its task, and with it torch."""
        if not self.config_file.is_file():
            raise TextnnError(f"{self.path}: not a textnn run directory (no config.yaml); give the "
                              f"directory `textnn train` wrote (runs/<config name> unless --run-dir was set)")
        raw = read_yaml(self.config_file)
        # `textnn train` writes every section; one missing means the file was cut short or edited by hand,
        # and the defaults that would fill it need not be what the weights were trained with.
        missing = [section for section in SAVED_SECTIONS if section not in raw]
        if missing:
            raise TextnnError(f"{self.config_file}: no '{missing[0]}' section, which `textnn train` always writes; "
                              f"the file was cut short or edited: put back the run's own config.yaml or re-train")
        return raw

    def status(self) -> dict:
        if not self.status_file.is_file():
            return {}
        try:
            data = json.loads(self.status_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict):
            raise TextnnError(f"{self.status_file}: damaged (not a JSON object); it only records the run's status: "
                              f"delete it and run the command again")
        return data

    def set_status(self, status: str, **info: object) -> None:
        """Rewrite run.json with `status` and `info`; `running` also records this process and a heartbeat."""
        if status == "running":
            info = {**info, "pid": os.getpid(), "host": socket.gethostname(), "heartbeat": round(time.time(), 1)}
        with self._lock:
            data = {**self.status(), **info, "status": status}
            atomic_write_text(self.status_file, json.dumps(data, indent=2))

    def record(self, **info: object) -> None:
        """Add `info` to run.json, the status unchanged."""
        with self._lock:
            atomic_write_text(self.status_file, json.dumps({**self.status(), **info}, indent=2))

    def beat(self) -> None:
        """Renew the heartbeat of a running run (nothing once it is no longer running)."""
        with self._lock:
            data = self.status()
            if data.get("status") == "running" and data.get("pid") == os.getpid():
                data["heartbeat"] = round(time.time(), 1)
                atomic_write_text(self.status_file, json.dumps(data, indent=2))

    def start_heartbeat(self, every: float = HEARTBEAT_SECONDS) -> Callable[[], None]:
        """Renew the heartbeat every `every` seconds from a thread (so also during a long evaluation),
        until the function returned is called."""
        def beat() -> None:
            try:
                self.beat()
            except OSError:  # a full disk or a vanished directory: the trainer finds out itself
                pass

        return start_beating(beat, every, "textnn-heartbeat")

    def recorded_precision(self) -> str | None:
        """The precision ("fp32" or "bf16") the run's weights were last trained in: its last training leg's
        in run.json (`precision_legs`; a finished run of an older textnn: its `precision`), or None for a
        run that recorded none."""
        info = self.status()
        legs = info.get("precision_legs")
        last = legs[-1] if isinstance(legs, list) and legs and isinstance(legs[-1], dict) else info
        found = last.get("precision")
        return found if found in ("fp32", "bf16") else None

    def effective_status(self) -> str:
        """run.json's status, but `died` for a run that says `running` and whose process is gone (on this
        host) or whose heartbeat is older than STALE_SECONDS (on any host); "" for no run.json."""
        info = self.status()
        status = info.get("status", "")
        if status != "running":
            return status
        pid = info.get("pid")
        if info.get("host") == socket.gethostname() and isinstance(pid, int) and not process_alive(pid):
            return "died"
        heartbeat = info.get("heartbeat")
        if not isinstance(heartbeat, (int, float)) or time.time() - heartbeat > STALE_SECONDS:
            return "died"
        return status

    def require_finished(self) -> None:
        """Commands that use trained weights call this first."""
        if not self.path.is_dir():
            raise TextnnError(f"{self.path}: run directory not found; check the path (`textnn train` writes "
                              f"runs/<config name> unless --run-dir was set)")
        self.raw_config()  # not a run's directory: refused by name (its config is resolved by the caller)
        if not self.weights_file.is_file():
            state = self.status().get("status", "unknown")
            raise TextnnError(f"{self.path}: run has no trained weights (status: {state}); "
                              f"finish it with `textnn train ... --resume` first")

    def append_metrics(self, record: dict) -> None:
        # O_NOFOLLOW: a symbolic link put in the file's place is refused, never appended through.
        try:
            descriptor = os.open(self.metrics_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            raise unwritable(self.metrics_file, err, "metrics file") from None
        with open(descriptor, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.on_record is not None:
            self.on_record(record)

    def read_metrics(self) -> list[dict]:
        if not self.metrics_file.is_file():
            return []
        lines = [line for line in self.metrics_file.read_text(encoding="utf-8", errors="replace").splitlines() if line]
        records = []
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            elif number < len(lines):  # a cut-off last line is a record a killed run was writing: dropped
                raise TextnnError(f"{self.metrics_file}:{number}: not a JSON record; the file was edited or damaged: "
                                  f"remove that line")
        return records

    def truncate_metrics(self, after_step: int) -> None:
        """On resume: forget records written after the checkpoint, since they will be produced again,
        and the final records of a finished run (`dev_final`, `test`, and the training record of its last step,
        marked `last`): the resumed run writes its own."""
        kept = [r for r in self.read_metrics()
                if r.get("step", 0) <= after_step and r.get("split") not in FINAL_SPLITS and r.get("last") is not True]
        atomic_write_text(self.metrics_file, "".join(json.dumps(r) + "\n" for r in kept))


class FollowerRunDir(RunDir):
    """The run directory as processes other than 0 see it under torchrun: process 0 writes it, they read.

    The trainer calls the same methods on every process; here the ones that write do nothing.
    """

    def create(self, config: Config, resume: bool, start_over: bool = False,
               saved: Callable[[], Config] | None = None) -> None:
        raise RuntimeError("process 0 creates the run directory")

    def set_status(self, status: str, **info: object) -> None:
        pass

    def beat(self) -> None:
        pass

    def append_metrics(self, record: dict) -> None:
        pass

    def truncate_metrics(self, after_step: int) -> None:
        pass


def changed_options(saved: Config, config: Config) -> list[tuple[str, object, object]]:
    """(dotted key, the run's value, config's value) of every option but the name where `config` differs
    from `saved`, a run's own config (resolve.run_config)."""
    before, wanted = _flatten(saved.to_dict()), _flatten(config.to_dict())
    return [(key, before.get(key), wanted.get(key)) for key in sorted(set(before) | set(wanted))
            if key != "name" and before.get(key) != wanted.get(key)]


def data_files(config: Config) -> dict[str, tuple[str, list[Path]]]:
    """The data that a run's steps depend on, by config key: (the path, the files read for it) of the training
    data, the dev and validation data (which pick the best weights) and the pretrained vectors (which may shape
    the vocabulary); those with no file are left out. Not data.test, which is read once, at the end, as it is
    then."""
    data = config.data
    named = {key: (path, data.files(path)) for key, path in (("data.train", data.train), ("data.dev", data.dev),
                                                              ("data.validation", data.validation))}
    if isinstance(data, WordVectorData) and os.path.isfile(data.vectors):
        named["data.vectors"] = (data.vectors, [Path(data.vectors)])
    return {key: (path, files) for key, (path, files) in named.items() if files}


def _disk_bytes(folder: Path) -> int:
    """Bytes of the files below `folder`, a file with two names (train.keep_checkpoint=all links the newest
    step's checkpoint to last.safetensors) counted once; symbolic links not followed."""
    sizes = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            sizes[stat.st_dev, stat.st_ino] = stat.st_size
    return sum(sizes.values())


def summaries(root: str | Path) -> list[dict]:
    """One summary per run directory (any directory holding a run.json) below `root`, sorted by path:
    name (the path relative to root), task, model, status (the effective one), metric and best, the split
    the best is of (`selected_on`: dev, or validation), the metric on dev at the end (`dev`: of the kept
    weights, evaluated once when selected on validation), steps, and bytes on disk. A run whose run.json or
    config.yaml cannot be read shows as `damaged`, and so does one whose run.json holds a listed field of
    another type (that field left empty)."""
    root = Path(root)
    if not root.is_dir():
        raise TextnnError(f"{root}: no such directory; give the folder that holds the runs (default runs/)")
    found = []
    for status_file in sorted(root.rglob("run.json")):
        run = RunDir(status_file.parent)
        row = {"name": str(run.path.relative_to(root)), "task": None, "model": None, "status": "damaged",
               "metric": None, "best": None, "selected_on": None, "dev": None, "steps": None,
               "bytes": _disk_bytes(run.path)}
        try:
            info, config = run.status(), run.raw_config()
            status = run.effective_status()
        except (TextnnError, OSError):
            found.append(row)
            continue
        model = config["model"].get("name") if isinstance(config["model"], dict) else None
        shown = {"status": status or "unknown", "metric": info.get("metric"), "best": info.get("best"),
                 "steps": info.get("steps", info.get("step"))}
        # A field of another type than textnn writes (run.json edited by hand or by another program) is left
        # out, and the run marked damaged: the rest of its row, and every other run, is still listed.
        wrong = [key for key, value in shown.items() if value is not None and
                 (isinstance(value, bool) or not isinstance(value, LISTED_TYPES[key]))]
        shown.update({key: None for key in wrong}, **({"status": "damaged"} if wrong else {}))
        dev = (info.get("dev") or {}).get(shown["metric"]) if isinstance(info.get("dev"), dict) else None
        selected_on = info.get("selected_on", "dev")
        row.update(task=str(config["task"]), model=model and str(model), **shown,
                   selected_on=selected_on if shown["best"] is not None and isinstance(selected_on, str) else None,
                   dev=dev if isinstance(dev, (int, float)) and not isinstance(dev, bool) else None)
        found.append(row)
    return found


def table_lines(rows: list[dict]) -> list[str]:
    """`textnn runs`' lines for `summaries` rows: name, task, model, status, metric, best, the set the best is
    of (with the number on dev, evaluated once, of a run that selected on validation), steps, size, each
    column as wide as its widest cell on a terminal (where a CJK character takes two places), the numbers
    right-aligned so that their digits line up."""
    table = [[row["name"], row["task"] or "-", row["model"] or "-", row["status"],
              (row["metric"] or "-") if row["best"] is not None else "-",
              f"{row['best']:.4g}" if row["best"] is not None else "", _selection(row),
              f"{row['steps']} steps" if row["steps"] is not None else "-", human_size(row["bytes"])]
             for row in rows]
    widths = [max(map(_display_width, column)) for column in zip(*table)]
    right = (False, False, False, False, False, True, False, True, True)
    return ["  ".join(" " * (width - _display_width(cell)) + cell if align else cell
                      + " " * (width - _display_width(cell)) for cell, width, align in zip(row, widths, right)).rstrip()
            for row in table]


def _selection(row: dict) -> str:
    """The `textnn runs` cell saying which set a run's best is of: "on dev", or "on validation" and the run's
    one dev number."""
    if row["selected_on"] is None:
        return ""
    dev = f", dev {row['dev']:.4g}" if row["selected_on"] != "dev" and row["dev"] is not None else ""
    return f"on {row['selected_on']}{dev}"


def _display_width(text: str) -> int:
    """Places `text` takes on a terminal: two for a wide (CJK) character, none for a combining mark."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1 for c in text)


def human_size(size: float) -> str:
    """1536 -> '1.5K': bytes in the units `du -h` uses."""
    for unit in ("B", "K", "M", "G"):
        if size < 1024:
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}T"


def _holder(text: str) -> tuple[str, str]:
    """(pid, host) from a lock file's text (written by `RunDir.lock`)."""
    try:
        info = json.loads(text)
        return str(int(info["pid"])), clip(info["host"])
    except (ValueError, KeyError, TypeError):  # its holder has taken it but not written it yet
        return "?", "?"


def _same_file(handle, path: Path) -> bool:
    """Whether the open `handle` is still the file at `path` (not one removed meanwhile)."""
    try:
        here, there = os.fstat(handle.fileno()), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _flatten(config: dict) -> dict:
    """{"train": {"lr": 1}} -> {"train.lr": 1}."""
    flat = {}
    for section, value in config.items():
        if isinstance(value, dict):
            flat.update({f"{section}.{key}": v for key, v in value.items()})
        else:
            flat[section] = value
    return flat
