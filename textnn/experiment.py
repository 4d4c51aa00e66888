"""What the commands do, as library functions: train, load a run, evaluate, generate, compare (predict and
translate read and write through the front layer, textnn/front.py).

`cli.py` only parses arguments and calls these; notebooks and scripts can call them directly.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from textnn import limits, registry
from textnn.config import Config, read_raw
from textnn.errors import TextnnError
from textnn.files import atomic_link, atomic_write_text, check_output_place, json_text, unwritable
from textnn.generation.decoding import DecodingConfig, PromptDecoder
from textnn.limits import check_training_memory
from textnn.resolve import config_from_dict, load_config, run_config, starts_with_head
from textnn.runs import FollowerRunDir, RunDir, changed_options, human_size
from textnn.training import distributed, precision
from textnn.training.budget import check_resume_budget
from textnn.training.checkpoint import check_checkpoint, load_weights, read_trainer_state
from textnn.training.progress import counting_batches
from textnn.training.trainer import TrainResult, TrainingInterrupted, ended_status, finished_status, resolve_device
from textnn.transfer import Start, open_start


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(config: Config, run_dir: str | Path | None = None, resume: bool = False,
          extend: bool = False, notes: Iterable[str] = (),
          after_selection: Callable[[int, float], bool] | None = None) -> tuple[RunDir, TrainResult]:
    """Train `config` into a run directory (default runs/<config name>) and write its report.

    `extend` (with `resume`): a larger budget may continue a run that ended with an evaluation outside its
    schedule (training/budget.check_resume_budget).
    `after_selection(step, value)`: called after each evaluation on the split the run selects on; True stops
    the run there, and run.json says `pruned` (`Trainer.after_selection`; a sweep's pruning).

    All data is read and checked, and the device found, before the run directory is made, so a bad
    file, config or device never leaves behind a directory that looks like a run.

    Under torchrun (training/distributed.py) every process reads the data (a bad file or config
    raises the same error in each); process 0 makes the run directory while the others wait, and
    alone writes into it.
    """
    # resolve_device: a GPU that is not there fails here, before data is read; so does bf16 asked of
    # hardware without it
    device = resolve_device(config.train.device)
    precision.resolve(config.train.precision, device)
    with distributed.session(device):
        run = RunDir(run_dir or Path("runs") / config.name)
        check_output_place(run.path, "directory", "--run-dir")  # before any data is read
        if not resume:
            run.check_fresh()  # a run already there: said before the data and word vectors are read
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        seed_everything(config.train.seed)
        if resume and not run.starts_over():  # before the data is read: an edited file is named as such
            run.check_data_files(config)
        task = registry.task_class(config.task).from_data(config)
        check_model_fits(task)
        model = task.build_model()
        with _one_writer(run) as created:
            if resume:
                _restore_last_checkpoint(run)
            start_over = resume and run.starts_over()
            if start_over:  # killed before its first checkpoint: nothing to continue, nothing to lose
                run.check_not_live()
                if distributed.is_main():
                    print(f"{run.path}: the run stopped before its first checkpoint, so there is nothing to resume; "
                          f"starting it over", file=sys.stderr)
                resume = False
            train_settings = config.train
            if resume:  # before run.create rewrites config.yaml: a refused resume changes nothing
                run.check_resume(config, lambda: run_config(run))
                check_checkpoint(run.checkpoint_file, model)  # a damaged one is refused here, not mid-run
                check_resume_budget(run, config, task, extend)
                if distributed.is_main():
                    for key, before, after in changed_options(run_config(run), config):
                        print(f"resuming {run.path} with {key}={after!r} (it had {before!r})", file=sys.stderr)
                    for note in notes:  # the caller's, said once the resume is taken
                        print(note, file=sys.stderr)
                # the run goes on in the precision it trained in, unless train.precision was changed now
                switch = config.train.precision != run.train_config().precision
                leg = precision.for_resumed_leg(run.recorded_precision(), config.train.precision, switch, device)
                train_settings = replace(config.train, precision=leg.name)
                if not switch and leg.name != precision.resolve(config.train.precision, device).name \
                        and distributed.is_main():
                    print(f"{run.path}: goes on in {leg.name}, the precision it trained in (train.precision="
                          f"{config.train.precision} would choose otherwise here; pass train.precision=... on "
                          f"--resume to switch, which run.json records)", file=sys.stderr)
            if config.start is not None and not resume:
                _start_encoder(model, config.start, with_head=starts_with_head(config),
                               grown_rows=(task.start_vocab_size, len(task.vocab)) if task.start_vocab_size else None)
            distributed.on_main(lambda: _create_run(run, config, resume, task, start_over, created))
            if not distributed.is_main():
                run = FollowerRunDir(run.path)
            trainer = task.trainer(model, train_settings, run)
            if after_selection is not None:
                trainer.after_selection = after_selection
            # run.json shows a live run (its heartbeat) until it is marked finished, after its report.
            stop_heartbeat = run.start_heartbeat()
            try:
                result = trainer.fit(resume=resume)
                if distributed.is_main():
                    try:
                        write_report(run, config, result, task)
                    except OSError as err:  # not a finished run: its report is missing (marked failed below)
                        raise unwritable(err.filename or run.path / "report.md", err, "report") from None
                run.set_status(ended_status(result), **finished_status(result))
            except TrainingInterrupted:
                raise
            except BaseException as err:
                lost = distributed.peer_lost(err, run.path, run.checkpoint_file.is_file())  # torchrun: a process died
                with contextlib.suppress(OSError, TextnnError):  # a full disk may refuse this too
                    run.set_status("failed", error=str(lost or err) or type(err).__name__)
                if lost is not None:
                    raise lost from None
                if isinstance(err, OSError):  # a full disk or a size limit met mid-run
                    raise unwritable(err.filename or run.path, err, "run's files") from None
                raise
            finally:
                stop_heartbeat()
            if config.train.keep_checkpoint == "none" and distributed.is_main():  # torchrun: process 0 alone
                freed = run.remove_checkpoint()
                print(f"{run.path}: {ended_status(result)}; removed checkpoint/ to free {human_size(freed)} (the "
                      f"weights stay in model.safetensors; train.keep_checkpoint=last keeps it for --resume)",
                      file=sys.stderr)
    return run, result


def check_model_fits(task) -> None:
    """Refuse a model too large to train in this machine's free memory before any of it is allocated: it is
    built first on the meta device (shapes, no storage) to count its parameters."""
    with torch.device("meta"):
        sized = task.build_model()
    check_training_memory(sum(parameter.numel() for parameter in sized.parameters()))


@contextlib.contextmanager
def _one_writer(run: RunDir) -> Iterator[bool]:
    """Hold the run's lock (`RunDir.lock`) for the block; yields whether the lock made the run directory.

    Under torchrun process 0 alone takes it (the others never write), and a run another process writes
    stops every process with the same error.
    """
    created = distributed.on_main(run.lock)
    try:
        yield created
    finally:
        run.unlock()


def resume_config(run_dir: str | Path | None, config_path: str | None, overrides: list[str]
                  ) -> tuple[Config, list[str]]:
    """The config `textnn train --resume` continues a run with: the run's own config.yaml, as it was
    configured (overrides and all), with `overrides` applied. `train` then refuses a change that a resume
    does not allow (RunDir.check_resume) and says each one it takes in a line. `run_dir` None:
    runs/<name of config_path>. A config file given as well is not read for settings: where it differs
    from the run's, the note returned beside the config says that the run's hold (`train(notes=...)`
    prints it once the resume is taken: a refused one prints its error alone)."""
    if run_dir is None:
        if config_path is None:
            raise TextnnError("--resume: name the run to continue, --run-dir RUN (or give its config file, whose "
                              "name gives runs/NAME)")
        run_dir = Path("runs") / load_config(config_path).name
    run = RunDir(run_dir)
    saved = run_config(run)  # not a run: refused here, by name
    config = config_from_dict(read_raw(run.config_file, overrides), str(run.config_file),
                              resolve_init=False)
    config.name = saved.name
    if config.init_from:  # resolved already, but a run started over reads its start's pipeline and weights again
        config.start = open_start(config.init_from, str(run.config_file))
    notes: list[str] = []
    if config_path is not None:
        differ = [key for key, _, _ in changed_options(saved, load_config(config_path)) if key not in
                  {item.split("=", 1)[0].strip() for item in overrides}]
        if differ:
            notes.append(f"note: {config_path} differs from the run's config in {', '.join(differ)}; the run goes "
                         f"on as it was configured ({run.config_file}); a change that a resume allows goes on the "
                         f"command line (e.g. train.max_steps=N)")
    return config, notes


def _restore_last_checkpoint(run: RunDir) -> None:
    """A run whose checkpoint/last.safetensors is gone but which kept its step checkpoints (train.
    keep_checkpoint=all) goes on from the newest intact one, which becomes last.safetensors again; one line
    says which. A damaged step checkpoint is passed over, also in one line."""
    if run.checkpoint_file.is_file():
        return
    for path in reversed(run.step_checkpoints()):
        try:
            read_trainer_state(path)
        except TextnnError as err:
            print(f"warning: {err}; trying an older step checkpoint", file=sys.stderr)
            continue
        atomic_link(path, run.checkpoint_file, "checkpoint")
        print(f"{run.path}: checkpoint/last.safetensors is missing; resuming from {path.name}, the newest intact "
              f"step checkpoint", file=sys.stderr)
        return


def _create_run(run: RunDir, config: Config, resume: bool, task, start_over: bool, created: bool) -> None:
    """The run directory's files that rebuild the task; if the place is unwritable, one error and nothing
    left behind of a directory this training made (`created`)."""
    try:
        run.create(config, resume, start_over, saved=lambda: run_config(run))
        if resume:
            _check_same_pipeline(run, task)
        task.save(run.path)
    except OSError as err:
        if created:
            shutil.rmtree(run.path, ignore_errors=True)
        raise unwritable(err.filename or run.path, err, "run directory") from None
    except TextnnError:
        if created:
            shutil.rmtree(run.path, ignore_errors=True)
        raise


def _check_same_pipeline(run: RunDir, task) -> None:
    """A resumed run must read its text as its checkpoint did: the tokenizer, vocabulary and labels the task
    built from the data again must be the files the run saved, or the weights would meet other ids. (A
    WordPiece trained again, when the data cache was cleared, may differ: the tokenizers library's
    training is not deterministic.) Refused before any file of the run is written."""
    with tempfile.TemporaryDirectory() as folder:
        rebuilt = Path(folder)
        task.save(rebuilt)
        for file in sorted(rebuilt.iterdir()):
            saved = run.path / file.name
            if saved.is_file() and saved.read_bytes() != file.read_bytes():
                raise TextnnError(f"{saved}: the {file.stem} built from the data now differs from the one the run "
                                  f"was trained with, so its checkpoint cannot continue here (the data cache may "
                                  f"have been cleared, and WordPiece training is not deterministic; or an older "
                                  f"textnn made the run, with other tokenizer rules); start a new "
                                  f"run from its weights, which reads its own tokenizer: model.init_from={run.path}")


def _start_encoder(model: torch.nn.Module, start: Start, with_head: bool = False,
                   grown_rows: tuple[int, int] | None = None) -> None:
    """Load the encoder weights of the run (or Hugging Face checkpoint) in model.init_from, and its head's
    `with_head` (a language model started from one), with `grown_rows` = (old, new) vocabulary rows when
    data.extend_vocab added words, and say what was loaded, new and left out."""
    loaded = start.load_into(model, with_head, grown_rows)
    init_from = start.path
    if grown_rows and distributed.is_main():
        print(f"init_from {init_from}: vocabulary extended from {grown_rows[0]} to {grown_rows[1]} entries "
              f"(data.extend_vocab); the new rows start at the mean of the old", file=sys.stderr)

    def names(keys: list[str]) -> str:
        return ", ".join(keys[:6]) + (f", ... ({len(keys)} in all)" if len(keys) > 6 else "") if keys else "none"

    if distributed.is_main():
        print(f"init_from {init_from}: loaded {len(loaded['loaded'])} encoder{' and head' if with_head else ''} "
              f"tensors; new here: "
              f"{names(loaded['new'])}; left out: {names(loaded['left_out'])}", file=sys.stderr)


def load_run(run_dir: str | Path, device: str = "cpu", batch_size: int | None = None,
             precision_asked: str | None = None) -> tuple[Config, object, torch.nn.Module]:
    """Rebuild (config, task, model) from a run directory; weights loaded, eval mode.

    `batch_size` (a command's --batch-size): examples per forward pass when the task evaluates or predicts
    (`Task.for_inference`); None = the run's own rule.
    `precision_asked` (a command's --precision: auto, fp32, bf16): what the model computes in; None = the
    precision the run trained in (training/precision.py `for_run`), one line on stderr saying so where
    this machine would choose otherwise. The returned config's train.precision holds the choice
    ("fp32" or "bf16"), which `in_run_precision` then applies.
    A run that is not finished (interrupted, died, still training) has the best weights so far: one
    warning line on stderr says so."""
    check_batch_size(batch_size)
    target = resolve_device(device, "--device")  # an absent GPU is refused before the run is read
    run = RunDir(run_dir)
    run.require_finished()
    config = run_config(run)
    status = run.effective_status()
    if status != "finished":  # interrupted, died, or still training: its weights are the best so far
        print(f"warning: {run.path} is not finished (status: {status or 'unknown'}); using its best weights so far",
              file=sys.stderr)
    task_class = registry.task_class(config.task)
    if task_class.mixed_precision:
        chosen, note = precision.for_run(run.recorded_precision(), precision_asked, target)
    else:  # computes in float32 whatever is asked: nothing to say
        chosen, note = precision.named("fp32", f"task {config.task} computes in float32"), None
    if note:
        print(note, file=sys.stderr)
    config.train = replace(config.train, precision=chosen.name)
    task = task_class.for_inference(run.path, config, batch_size)
    model = task.build_model()
    load_weights(model, run.weights_file)
    return config, task, model.to(target).eval()


def check_batch_size(batch_size: int | None) -> None:
    """A --batch-size is a whole number of examples in [1, limits.MAX_BATCH] (None: not given)."""
    if batch_size is None:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise TextnnError(f"--batch-size: got {batch_size!r}, expected an integer >= 1")
    limits.check_count(batch_size, "batch", "--batch-size")


def in_run_precision(config: Config, model: torch.nn.Module):
    """The context a loaded run's model computes in: the precision `load_run` chose (its config's
    train.precision, "fp32" or "bf16"; "auto" in a config not from `load_run`: this machine's choice)."""
    device = next(model.parameters()).device
    setting = config.train.precision
    chosen = precision.resolve(setting, device) if setting == "auto" else precision.named(setting, "the run's")
    return precision.autocast(chosen, device)


def evaluate_loaded(config: Config, task, model: torch.nn.Module, data_path: str, bootstrap_samples: int,
                    options=None, name: str = "") -> dict:
    """Metrics of a loaded run (`load_run`) on a labelled file read with the run's own data settings, as
    `textnn evaluate` and the Python API give them: `options` are the task's (`Task.Options`, built from the
    command's flags by `front.options_for`; None: the defaults), `name` is the run's in the progress line."""
    limits.check_count(bootstrap_samples, "bootstrap", "bootstrap_samples")  # before the data is read
    with torch.no_grad(), in_run_precision(config, model), \
            counting_batches(model, f"evaluate {name}", enabled=config.train.progress):
        return task.evaluate_file(model, data_path, bootstrap_samples=bootstrap_samples, options=options)


def word_vectors_of(run_dir: str | Path):
    """The word vectors of a word-embeddings run (metrics/word_vectors.WordVectors)."""
    _, task, model = load_run(run_dir)
    if "word_vectors" not in task.capabilities:
        raise TextnnError(f"{run_dir}: not a word-embeddings run (task {task.config.task}); `neighbors` and "
                          f"`analogy` read runs of task embeddings")
    return task.word_vectors(model)


def neighbors_run(run_dir: str | Path, words: list[str], k: int = 10) -> dict[str, list[tuple[str, float]]]:
    """The k nearest words (cosine) of each word, from a word-embeddings run."""
    vectors = word_vectors_of(run_dir)
    return {word: vectors.neighbors(word, k) for word in words}


def analogy_run(run_dir: str | Path, a: str, b: str, c: str, k: int = 10) -> list[tuple[str, float]]:
    """a is to b as c is to ?: the k best answers (3CosAdd) of a word-embeddings run."""
    return word_vectors_of(run_dir).analogy(a, b, c, k)


def metric_lines(run_dir: str | Path, metrics: dict) -> list[str]:
    """The lines `textnn evaluate` prints for a run's metrics (the task lays them out)."""
    config = run_config(RunDir(run_dir))
    return registry.task_class(config.task).from_run(Path(run_dir), config).format_metrics(metrics)


def export_run(run_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Write a bert or gpt run as a Hugging Face checkpoint directory (interop/huggingface.py); the place is
    checked before the run is loaded."""
    from textnn.interop import huggingface

    check_output_place(out_dir, "directory", "export to")
    huggingface.check_export_place(Path(run_dir), Path(out_dir))
    return huggingface.export_run(run_dir, load_run(run_dir), out_dir, RunDir(run_dir).status().get("model"))


def _load_decoder_run(run_dir: str | Path, command: str, device: str = "cpu", batch_size: int | None = None,
                      precision_asked: str | None = None) -> tuple[Config, object, torch.nn.Module]:
    """load_run for the commands that decode token by token; a run whose model cannot is refused by name."""
    config, task, model = load_run(run_dir, device, batch_size, precision_asked)
    _require_decoder(run_dir, config, model, command)
    return config, task, model


def _require_decoder(run_dir: str | Path, config: Config, model: torch.nn.Module, command: str) -> None:
    if not isinstance(model, PromptDecoder):
        raise TextnnError(f"{run_dir}: `{command}` needs a language model run (a model that reads text token by "
                          f"token); this run is a {config.task} run (model {config.model_name})")


def generate_run(run_dir: str | Path, prompt: str, decoding: DecodingConfig, num_samples: int = 1,
                 on_text=None, device: str = "cpu", batch_size: int | None = None, precision_asked: str | None = None):
    """Continue `prompt` with a trained language model as the `DecodingConfig` says; see generation/lm.py.

    Returns a `textnn.generation.Generation` (the samples or hypotheses, the seed used, unknown prompt tokens).
    `on_text` (one sample, not beam search): called with the text in pieces as it is generated.
    `batch_size`: samples drawn side by side (`generate_in_batches`); None = all of them at once.
    """
    config, task, model = _load_decoder_run(run_dir, "generate", device, batch_size, precision_asked)
    return generate_in_batches(config, model, task, prompt, decoding, num_samples, batch_size, on_text)


def generate_in_batches(config: Config, model: torch.nn.Module, task, prompt: str, decoding: DecodingConfig,
                        num_samples: int = 1, batch_size: int | None = None, on_text=None):
    """`generate_text` of `num_samples` samples, at most `batch_size` of them drawn side by side (None: all).

    Only sampling draws several rows; greedy and beam search decode one prompt row whatever the size. The
    first batch is drawn with `decoding.seed`, batch k (from 0) with `batch_seed(seed, k)`: the same seed
    and batch size give the same samples, and a batch size of at least `num_samples` gives what one batch
    of them gives.
    """
    from textnn.generation.lm import generate_text

    batched = (decoding.search.seeded and batch_size is not None and isinstance(num_samples, int)
               and num_samples > batch_size)
    if not batched:
        with in_run_precision(config, model):
            return generate_text(model, task, prompt, decoding, num_samples=num_samples, on_text=on_text)
    limits.check_count(num_samples, "samples", "num_samples (--num-samples)")
    seed = decoding.with_seed().seed
    parts = []
    for number, first in enumerate(range(0, num_samples, batch_size)):
        with in_run_precision(config, model):
            parts.append(generate_text(model, task, prompt, replace(decoding, seed=batch_seed(seed, number)),
                                       num_samples=min(batch_size, num_samples - first), on_text=on_text))
    return replace(parts[0], samples=[text for part in parts for text in part.samples],
                   continuations=[text for part in parts for text in part.continuations],
                   new_tokens=[count for part in parts for count in part.new_tokens],
                   scores=[score for part in parts for score in part.scores])


def batch_seed(seed: int, number: int) -> int:
    """The seed of batch `number` (from 0) of one prompt's samples: the prompt's seed for the first, then
    seeds far from the SEED + i that `generate RUN FILE` gives its lines i, so no two batches share one."""
    return seed if number == 0 else (seed + number * 1_000_003) % 2 ** 31


# Prompts `generate RUN FILE` reads and answers at a time: those of a part read as equally many tokens are
# decoded side by side (each with its own seed), and a part is how often output is flushed: small, since
# one prompt may take seconds.
GENERATE_CHUNK_LINES = 16


def generate_file_run(run_dir: str | Path, lines: Iterable[str], source: str, decoding: DecodingConfig,
                      num_samples: int = 1, device: str = "cpu", batch_size: int | None = None,
                      precision_asked: str | None = None) -> Iterator[str]:
    """One JSON line per prompt line (its line ending dropped; an empty line is an empty prompt), read and
    answered part by part; each holds what `generate_run` gives for that prompt alone (`generate_each`).

    Each line: {"prompt", "text"}, or {"prompt", "samples"} for several samples; beam search adds "score",
    or gives its n-best list as {"prompt", "hypotheses", "scores"} (best first, the n-best format of every
    command); "unknown_tokens" when some prompt tokens are not in the vocabulary.
    `batch_size`: a prompt's samples drawn side by side (`generate_in_batches`); None = all at once.
    """
    from textnn.tasks.base import line_chunks

    config, task, model = _load_decoder_run(run_dir, "generate", device, batch_size, precision_asked)
    prompts = (line.rstrip("\n").removesuffix("\r") for line in lines)
    for _, chunk in line_chunks(generate_each(config, task, model, prompts, decoding, num_samples, batch_size,
                                              source), GENERATE_CHUNK_LINES):
        rows = [json_text(generation_row(found, decoding), ensure_ascii=False) for found in chunk]
        yield from rows  # the part's lines together, once all of them are done


def generation_row(found, decoding: DecodingConfig) -> dict:
    """A `Generation` as the JSON line `generate RUN FILE` prints for its prompt: {prompt, text} (beam search
    adds score), {prompt, samples} for several samples, {prompt, hypotheses, scores} for an n-best list;
    unknown_tokens when some prompt tokens are not in the vocabulary."""
    row: dict = {"prompt": found.prompt}
    scores = [round(score, 6) for score in found.scores]
    if len(found.samples) == 1:
        row["text"] = found.samples[0]
        if decoding.search.ranked:
            row["score"] = scores[0]
    elif decoding.search.ranked:
        row.update(hypotheses=found.samples, scores=scores)
    else:
        row["samples"] = found.samples
    if found.unknown_tokens:
        row["unknown_tokens"] = found.unknown_tokens
    return row


def generate_each(config: Config, task, model: torch.nn.Module, prompts: Iterable[str], decoding: DecodingConfig,
                  num_samples: int = 1, batch_size: int | None = None, source: str = "prompts"):
    """The `Generation` of each prompt, each as it is alone, as `generate RUN FILE` and the Python API's
    `generate([...])` give them. With sampling, prompt i (from 1) is drawn with seed `decoding.seed + i - 1`
    (a seed drawn from the operating system when None): prompt 1 is what `generate --prompt P --seed SEED`
    gives, and equal prompts still get different samples. Prompts are read GENERATE_CHUNK_LINES at a time,
    and those of a part read as equally many tokens are decoded side by side (`generate_texts`), unless a
    prompt's samples are drawn in several batches (`generate_in_batches`). An error names `source` and the
    prompt's number."""
    from textnn.generation.lm import Request, generate_texts
    from textnn.tasks.base import line_chunks

    decoding = decoding.with_seed()
    in_parts = (decoding.search.seeded and batch_size is not None and isinstance(num_samples, int)
                and num_samples > batch_size)
    for first, chunk in line_chunks(prompts, GENERATE_CHUNK_LINES):
        numbers = range(first, first + len(chunk))
        if not in_parts:
            try:
                with in_run_precision(config, model):
                    found = generate_texts(model, task, [Request(prompt, prompt_decoding(decoding, number), num_samples)
                                                         for number, prompt in zip(numbers, chunk)])
            except TextnnError:  # a prompt the model refuses: each alone below, so that the error names it
                found = None
            if found is not None:
                yield from found
                continue
        for number, prompt in zip(numbers, chunk):
            try:
                found = generate_in_batches(config, model, task, prompt, prompt_decoding(decoding, number),
                                            num_samples, batch_size)
            except TextnnError as err:
                raise TextnnError(f"{source}:{number}: {err}") from None
            yield found


def prompt_decoding(decoding: DecodingConfig, number: int) -> DecodingConfig:
    """The decoding of prompt `number` (from 1) of several (`generate_each`), from a decoding whose seed is fixed
    (`with_seed`): seed + number - 1 when sampling."""
    if not decoding.search.seeded:
        return decoding
    return replace(decoding, seed=(decoding.seed + number - 1) % 2 ** 31)


def visualize_run(run_dir: str | Path, text: str, output_dir: str | Path | None = None, device: str = "cpu",
                  batch_size: int | None = None, precision_asked: str | None = None) -> list[Path]:
    """Views of a model reading `text`: a task's own view (translation: the source x target attention),
    or, for language models, attention heatmaps (Transformers) or LSTM cells.

    Files go to `output_dir` (default <run>/views); returns their paths. `batch_size` (--batch-size, which
    every command that runs a model takes) changes nothing here: the view reads one text as one sequence,
    and a note on stderr says so.
    """
    check_batch_size(batch_size)
    output = check_output_place(output_dir or Path(run_dir) / "views", "directory",
                                "--output-dir" if output_dir else "the run's views folder")  # before the run is read
    if output_dir and output.is_dir() and any(output.iterdir()):  # its index.html, layer_N.png... would go unseen
        raise TextnnError(f"--output-dir {output}: the folder is not empty; give a new or empty folder (or leave "
                          f"out --output-dir to write the run's own views folder)")
    config, task, model = load_run(run_dir, device, precision_asked=precision_asked)
    if batch_size is not None:
        print(f"note: --batch-size {batch_size} does not apply here: a view reads its one text as one sequence",
              file=sys.stderr)
    if "write_views" in task.capabilities:
        with in_run_precision(config, model):
            return task.write_views(model, text, output, title=f"Attention of {Path(run_dir).name}")
    _require_decoder(run_dir, config, model, "visualize")
    if model.shows_attention:
        from textnn.viz.attention import write_attention_view

        with in_run_precision(config, model):
            return write_attention_view(model, task, text, output, title=f"Attention of {Path(run_dir).name}")
    # The cell view steps an LSTM's cells by hand to read its gates: in float32, whatever the run's precision
    # (its states are what one reads there, not a metric to compare with training's)
    from textnn.viz.lstm_cells import write_cell_view  # refuses, by name, models without LSTM cells

    return [write_cell_view(run_dir, (config, task, model), text, output / "cells.html").path]


PERCENT_METRICS = ("bleu", "chrf")  # reported on a 0-100 scale by their tasks


@dataclass
class CompareRow:
    name: str
    model: str
    metric: str
    value: float
    ci_low: float | None
    ci_high: float | None
    higher_is_better: bool
    parameters: int
    train_seconds: float
    examples_per_second: float
    run_dir: str
    selected_on: str = "dev"  # the set the run chose its weights on: its dev number is no evidence when "dev"
    validation: float | None = None  # a sweep's trial: its value on validation, which ranked it (textnn/sweep.py)
    params: str = ""  # a sweep's trial: its setting


def compare(config_paths: list[str], overrides: list[str], runs_root: str | Path,
            plot: str | Path | None = None) -> list[CompareRow]:
    """Train each config (same overrides for all) and collect one comparable row per config. A config whose
    run an earlier compare finished under `runs_root` is not trained again: its run is reused. With `plot`,
    one PNG there shows the runs side by side (`plot_comparison`); its place is checked before any training."""
    configs = [load_config(path, overrides) for path in config_paths]  # fail fast on any bad config
    if plot:
        check_output_place(plot, "file", "--plot")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise TextnnError(f"two configs share the run name {names}; give each a distinct `name:`")
    done = [_finished_before(RunDir(Path(runs_root) / config.name), config) for config in configs]  # all checked first
    rows = []
    for config, finished in zip(configs, done):
        if finished:
            print(f"{finished.path}: finished by an earlier compare with this config; reusing it (remove the "
                  f"directory to train it again)", file=sys.stderr)
            rows.append(run_row(finished, config.name))
            continue
        run, result = train(config, Path(runs_root) / config.name)
        rows.append(_row(config, run, result.metric_name, result.dev or result.test, result.higher_is_better,
                         result.parameters, result.train_seconds, result.examples_per_second, result.selected_on))
    if plot:
        plot_comparison_rows(rows, plot)
        print(f"comparison plot: {plot}", file=sys.stderr)
    return rows


def plot_comparison_rows(rows: list[CompareRow], path: str | Path):
    """Draw `rows` (one per run) as one PNG at `path`: each run's dev metric at every evaluation its
    metrics.jsonl holds, and its final value with its bootstrap interval. Returns the figure."""
    from textnn.viz.plots import ComparedRun, plot_comparison

    runs = []
    for row in rows:
        curve = [(record["step"], record[row.metric]) for record in RunDir(row.run_dir).read_metrics()
                 if record.get("split") == "dev" and isinstance(record.get(row.metric), (int, float))
                 and isinstance(record.get("step"), (int, float))]
        runs.append(ComparedRun(name=row.name, metric=row.metric, value=row.value, ci_low=row.ci_low,
                                ci_high=row.ci_high, curve=curve))
    return plot_comparison(runs, path)


# Options that change how a run is shown or where it computes, not what it learns: a finished run
# trained with other values of them is still the run the config asks for.
COMPARE_IGNORED = {"train.progress", "train.threads", "train.device", "train.keep_checkpoint"}


def _finished_before(run: RunDir, config: Config) -> RunDir | None:
    """The run of `config` that an earlier compare finished at `run`, to reuse; None when there is none
    yet. A run there that is unfinished, or was trained with another config, is refused."""
    if not run.path.is_dir() or not any(p != run.lock_file for p in run.path.iterdir()):
        return None
    remedy = f"remove {run.path} to train it again, or choose another --output-dir"
    status = run.effective_status() if run.status_file.is_file() else "unknown"
    if status != "finished":
        raise TextnnError(f"{run.path}: an earlier run of {config.name} is there and not finished "
                          f"(status: {status}); {remedy}")
    changed = [item for item in changed_options(run_config(run), config) if item[0] not in COMPARE_IGNORED]
    if changed:
        key, saved, wanted = changed[0]
        raise TextnnError(f"{run.path}: the run there was trained with {key}={saved!r}, this compare asks for "
                          f"{wanted!r}; {remedy}")
    return run


def run_row(run: RunDir, name: str = "") -> CompareRow:
    """The comparison row of a finished run, from its run.json and its model; `name` (default the run's
    config's) is its name in the table."""
    info = run.status()
    config, task, model = load_run(run.path)
    config.name = name or config.name
    metric = info["metric"]
    return _row(config, run, metric, info.get("dev") or info.get("test") or {}, task.higher_is_better(metric),
                model.num_parameters(), info.get("train_seconds", 0.0), info.get("examples_per_second", 0.0),
                info.get("selected_on", "dev"))


def _row(config: Config, run: RunDir, metric: str, dev: dict, higher_is_better: bool, parameters: int,
         train_seconds: float, examples_per_second: float, selected_on: str) -> CompareRow:
    return CompareRow(name=config.name, model=config.model_name, metric=metric,
                      value=float(dev.get(metric, float("nan"))),
                      ci_low=dev.get(f"{metric}_ci_low"), ci_high=dev.get(f"{metric}_ci_high"),
                      higher_is_better=higher_is_better, parameters=parameters, train_seconds=train_seconds,
                      examples_per_second=examples_per_second, run_dir=str(run.path), selected_on=selected_on)


def format_table(rows: list[CompareRow], markdown: bool = False) -> str:
    """The comparison table; rows of a sweep's trials (`sweep.compare_sweep`) add their setting and their value
    on validation, which ranked them."""
    sweep = any(r.validation is not None for r in rows)
    header = ["config", *(["setting", "validation"] if sweep else []), "model", "dev metric", "95% CI",
              "selected on", "params", "train time", "examples/s"]
    body = []
    for r in rows:
        # Scores in [0, 1] (accuracy, F1, ...) read as percentages; losses, perplexity, bpc and the scores
        # sacreBLEU already gives in percent (BLEU, chrF) as they are.
        scale = 100 if r.higher_is_better and r.metric not in ("loss", *PERCENT_METRICS) else 1
        ci = f"[{scale * r.ci_low:.1f}, {scale * r.ci_high:.1f}]" if r.ci_low is not None else "-"
        trial = [r.params, f"{scale * r.validation:.2f}" if r.validation is not None else "-"] if sweep else []
        body.append([r.name, *trial, r.model, f"{r.metric} {scale * r.value:.2f}", ci, r.selected_on,
                     f"{r.parameters:,}", f"{r.train_seconds:.1f}s", f"{r.examples_per_second:,.0f}"])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, body)])


def selection_lines(result: TrainResult) -> list[str]:
    """What report.md says of the set the run chose its kept weights on: a number chosen by looking at a set
    is no evidence on that set, so a run that selected on dev says so beside its dev numbers."""
    if result.selected_on == "validation" and result.best_metric is not None:
        return [f"- selected on: validation ({result.metric_name} {result.best_metric:.4f} at step "
                f"{result.best_step}); dev and test are evaluated once, on the kept weights"]
    if result.dev:
        return ["- selected on dev: its numbers below chose the kept weights, so they are no held-out evidence "
                "(data.validation or data.validation_split selects on another set)"]
    return []


def write_report(run: RunDir, config: Config, result: TrainResult, task) -> None:
    """report.md with the final numbers, a loss-curve plot and the task's own sections (a confusion
    matrix, a per-type table, ...)."""
    from textnn.viz.plots import plot_loss_curve

    records = run.read_metrics()
    # A run with no dev set whose every step's loss was not finite has logged no loss: nothing to plot.
    has_losses = any(isinstance(r.get("loss"), (int, float)) for r in records)
    if has_losses:
        plot_loss_curve(records, run.path / "loss.png")
    lines = [f"# Run {run.path.name}", "",
             f"- task: {config.task}, model: {config.model_name} (preset: {config.model_preset or 'none'})"
             + (f", started from {config.init_from}" if config.init_from else ""),
             f"- parameters: {result.parameters:,}",
             f"- steps: {result.steps}, epochs completed: {result.epochs_completed}, stopped: {result.stopped}"
             + (f", {result.skipped_steps} skipped for a non-finite loss" if result.skipped_steps else ""),
             f"- training time: {result.train_seconds:.1f} s, {result.examples_per_second:,.0f} examples/s, "
             f"{result.tokens_per_second:,.0f} tokens/s",
             f"- date: {time.strftime('%Y-%m-%d %H:%M')}, device: {result.device}", *selection_lines(result), ""]
    kept = "evaluated once, on the kept weights of" if result.selected_on == "validation" else "best checkpoint,"
    for split, metrics in (("dev", result.dev), ("test", result.test)):
        if not metrics:
            continue
        lines += [f"## {split} ({kept} step {result.best_step})", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items() if isinstance(v, float)]
        lines.append("")
        lines += task.report_sections(metrics, split, run.path)
    if has_losses:
        lines += ["![loss curve](loss.png)", ""]
    atomic_write_text(run.path / "report.md", "\n".join(lines))  # by replace: never through a link
    print(f"wrote {run.path / 'report.md'}", file=sys.stderr)
