"""What every task is: the protocol the trainer and the commands rely on, declared as abstract classes.

A task turns data into batches, puts its head on an encoder, computes the loss and the metrics,
predictions (typed `Example`s in, typed `Prediction`s out: the front layer, textnn/front.py, reads the
input into examples and prints the predictions) and the task's part of the report. The trainer and the
commands call only the methods declared here, so `experiment.py` and `cli.py` never ask which task a run
is.

`Task` is what every task gives: building (`from_data`, `from_run`, `save`, `build_model`), its
splits, its trainer, the commands' methods. `BatchTask` adds what the generic trainer
(training/trainer.py) reads: `train_batches`, `num_train_batches`, `loss`, `evaluate`, `encode_file`.
Every task but word embeddings (word2vec's own sparse loop) is a `BatchTask`. A batch is a
`data.batching.Batch`.

Class attributes:
    data_config        the task's DataConfig subclass: `data:` options are checked by it
    head_config        the dataclass of its `head:` options
    metric_directions  every metric it reports that a run may select on -> True when higher is better
    intervals          whether `evaluate` gives a bootstrap interval when asked (bootstrap_samples > 0)
    mixed_precision    whether its model computes under bf16 autocast where a run's precision says bf16
                       (word2vec's own loop is float32 whatever the setting)
    capabilities       what the task offers beyond the protocol, by name (CAPABILITIES): the commands
                       read this set instead of probing for methods
    Example, Prediction, Options
                       the dataclasses `predict` takes and gives, and its options (None: no predict)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator, Protocol

from textnn import registry
from textnn.config import Config, DataConfig, NoHeadOptions
from textnn.data.batching import Batch, bucket_batches
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab, read_run_json
from textnn.errors import TextnnError, short
from textnn.models.base import InputSpec
from textnn.tasks import pipeline


# Examples `predict` is given at a time (the front layer, textnn/front.py, reads and answers the input in parts
# of this many lines): memory stays constant however long the input, and the first answers come out while
# the rest is still being read (a pipe into `head` ends at once).
PREDICT_CHUNK_LINES = 256


def line_chunks(lines: Iterable, size: int = PREDICT_CHUNK_LINES,
                ends_chunk: Callable[[str, str], bool] | None = None) -> Iterator[tuple[int, list]]:
    """(number of its first item, items) for consecutive parts of `lines` (lines, or any items), read lazily.

    A part holds `size` items, or with `ends_chunk(previous, line)` it goes on until that says a part
    may end before `line` (a CoNLL sentence is never cut in two).
    """
    chunk: list = []
    first = 1
    for line in lines:
        if ends_chunk is not None and len(chunk) >= size and ends_chunk(chunk[-1], line):
            yield first, chunk
            first, chunk = first + len(chunk), []
        chunk.append(line)
        if ends_chunk is None and len(chunk) >= size:  # at once: the next line may be long in coming
            yield first, chunk
            first, chunk = first + len(chunk), []
    if chunk:
        yield first, chunk


@dataclass(frozen=True)
class NoOptions:
    """The options of a task that takes none of its own: the front layer refuses any flag given for it."""


@dataclass(frozen=True)
class Table:
    """A run's training table given as `predict` input (`Task.table`): each row (after the header line, when
    the table has one) is split at `delimiter` (by standard CSV quoting with `quoting`), and the fields at
    `columns` make its example."""

    columns: list[int]
    delimiter: str = "\t"
    quoting: bool = False
    reading: str = ""  # what the line said on stderr says is read: "predicting on its 'sentence' column"
    header: bool = True  # the first line names the columns (False: it is a row, as in a table without header)


def unbuilt_inputs(encoder_cls: type, builds: tuple[str, ...], task: str) -> str | None:
    """Why `task`, which builds the inputs `builds` beside the token ids, cannot feed an encoder of `encoder_cls`
    (the inputs it reads that the task does not build); None when it can (`Task.unusable_reason`)."""
    missing = [name for name in encoder_cls.reads if name not in builds]
    return f"it reads {' and '.join(missing)} features, which {task} does not build" if missing else None


def build_encoder(config: Config, vocab: Vocab, **inputs):
    """The encoder model.name names, built with model's options to read ids of `vocab`; `inputs`: what else
    `InputSpec` says of its inputs (word vectors, characters, casings, a frozen encoder's size)."""
    return registry.encoder_class(config.model_name)(config.model,
                                                     InputSpec(vocab_size=len(vocab), pad_id=vocab.pad_id, **inputs))


def perplexity(loss: float) -> float:
    """exp of a mean loss in nats per token; inf where that overflows a float (a loss past 700)."""
    return math.exp(loss) if loss < 700 else float("inf")


# Capabilities a task may declare (Task.capabilities), each with the method it then has:
#   word_vectors     word_vectors(model) -> WordVectors            (`neighbors`, `analogy`)
#   translate_lines  translate_lines(model, lines, decoding)        (`translate` takes such runs only)
#   write_views      write_views(model, text, output, title) -> paths  (`visualize`: the task's own view)
CAPABILITIES = frozenset({"word_vectors", "translate_lines", "write_views"})


class Task(ABC):
    capabilities: ClassVar[frozenset[str]] = frozenset()
    data_config: ClassVar[type] = DataConfig
    head_config: ClassVar[type] = NoHeadOptions
    metric_directions: ClassVar[dict[str, bool]] = {"loss": False}
    formats: ClassVar[tuple[str, ...]] = ()  # data.format values the task reads
    # Whether `evaluate(..., bootstrap_samples > 0)` adds a bootstrap interval (or anything else) to what
    # it gives without: when not, the trainer reports the best weights' dev numbers as they were selected
    # instead of evaluating dev once more at the end.
    intervals: ClassVar[bool] = True
    mixed_precision: ClassVar[bool] = True
    # What `predict` takes and gives, and the options of the task's own that the commands' flags set (the front
    # layer, textnn/front.py, builds them once: `options_for`). A task with no Example does not predict.
    Example: ClassVar[type | None] = None
    Prediction: ClassVar[type | None] = None
    Options: ClassVar[type] = NoOptions
    printed_digits: ClassVar[int] = 6  # digits of the floats in the JSON lines `predict` prints
    reads_conll: ClassVar[bool] = False  # predict input may be CoNLL columns, and output CoNLL (--input/output-format)
    metric_note: ClassVar[str] = ""  # what `textnn explain TASK` says about its metrics (train.metric), if anything
    # A run started (model.init_from) from a run of the same task takes that run's head and head options
    # too, when the head depends only on what it inherits (a language model's output layer, BERT's MLM head:
    # the vocabulary).
    keeps_start_head: ClassVar[bool] = False
    # Whether the task reads data.validation / data.validation_split into a `validation` split, which the
    # trainer then selects on instead of dev (see Trainer); the other tasks refuse the options.
    reads_validation: ClassVar[bool] = False
    # data.validation_split: how the held-out rows were drawn (share, seed, counts, a hash of their lines),
    # which run.json records and a resumed run must draw again; None otherwise.
    validation_rows: dict | None = None
    # With data.extend_vocab: the size of the starting run's vocabulary; ids from it on are words added here.
    start_vocab_size: int | None = None
    # Examples per forward pass when evaluating or predicting, as a command asked (--batch-size; the unit is
    # the task's: sentences, lines, pairs, windows); None = the task's own rule (`pipeline.eval_batch_size`,
    # or its fixed sizes). Given once, when a trained run's task is made for a command (`for_inference`);
    # training never sets it.
    inference_batch_size: int | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        unknown = cls.capabilities - CAPABILITIES
        if unknown:
            raise TypeError(f"{cls.__name__}.capabilities: unknown {sorted(unknown)}; known: {sorted(CAPABILITIES)}")

    # --- what the task can use ----------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        """Why this task cannot put its head on encoders of `encoder_cls` (None when it can)."""

    # --- building -----------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def from_data(cls, config: Config) -> "Task":
        """The task with its text pipeline (tasks/pipeline.py) and splits read from the data files; with
        model.init_from, the pipeline comes from the starting run."""

    @classmethod
    @abstractmethod
    def from_run(cls, run_path: Path, config: Config) -> "Task":
        """The task as a run saved it (`save`), without reading any data file."""

    @classmethod
    def for_inference(cls, run_path: Path, config: Config, batch_size: int | None = None) -> "Task":
        """The task of a trained run (`from_run`) as a command evaluates and predicts with it: `batch_size`
        examples per forward pass (its --batch-size, `inference_batch_size`); None = the task's own rule."""
        task = cls.from_run(run_path, config)
        task.inference_batch_size = batch_size
        return task

    @abstractmethod
    def save(self, run_path: Path) -> None:
        """Write what `from_run` reads (tokenizer, vocabulary, labels: JSON files)."""

    @abstractmethod
    def build_model(self):
        """The model to train: an encoder with this task's head (`EncoderWithHead`, or an `EncoderDecoder`)."""

    @abstractmethod
    def has_split(self, split: str) -> bool:
        """Whether the run has data for `split` (train, dev, test)."""

    @property
    @abstractmethod
    def default_metric(self) -> str:
        """The metric a run selects its best weights on unless train.metric names another (a class attribute
        or a property)."""

    @classmethod
    def check_config(cls, config: Config) -> None:
        """Checks across sections, run before anything is read or written (raise TextnnError)."""
        if config.data.format not in cls.formats:
            raise TextnnError(f"config key data.format: got {short(config.data.format)}; task {config.task} reads "
                              f"{', '.join(cls.formats)}")
        given = "data.validation" if config.data.validation else "data.validation_split" \
            if config.data.validation_split else None
        if given and not cls.reads_validation:
            raise TextnnError(f"config key {given}: is not supported for task {config.task} yet; select on data.dev "
                              f"(leave {given} unset)")
        metric = config.train.metric
        if metric and metric not in cls.metrics_for(config):
            raise TextnnError(f"config key train.metric: task {config.task} does not report {metric!r}; choose one "
                              f"of {', '.join(cls.metrics_for(config))}")

    @classmethod
    def metrics_for(cls, config: Config) -> list[str]:
        """The metrics a run with this config reports on dev (those `train.metric` may name)."""
        return list(cls.metric_directions)

    def higher_is_better(self, metric: str) -> bool:
        return self.metric_directions[metric]

    @property
    def selected_metric(self) -> str:
        """The metric the run selects on: train.metric, else the task's default (the one a bootstrap interval
        is drawn for)."""
        return self.config.train.metric or self.default_metric  # type: ignore[attr-defined]

    # --- state carried between training batches ----------------------------------------------------
    def carried_state(self) -> object:
        """What the next training batch starts from (tensors, tuples, lists; None: nothing carried)."""
        return None

    def restore_carried_state(self, state: object) -> None:
        """Take back `carried_state()` as a checkpoint saved it, on the trainer's device (on resume)."""

    # --- run files ----------------------------------------------------------------------------------
    @staticmethod
    def read_json(path: Path) -> object:
        """A JSON file of a run, or one clear error naming it."""
        return read_run_json(path)

    @classmethod
    def saved_tokenizer(cls, data: DataConfig) -> tuple[str, bool]:
        """(kind, lowercase) of the tokenizer a run of this task with these data options saves."""
        return data.tokenizer, data.lowercase

    @classmethod
    def load_text_pipeline(cls, run_path: Path, data: DataConfig | None = None) -> tuple[Tokenizer, Vocab]:
        """The tokenizer and vocabulary a run of this task read its text with (`pipeline.load`); with `data`
        (the run's data options), a tokenizer.json other than the one `saved_tokenizer(data)` says the
        run saved is refused."""
        return pipeline.load(run_path, cls.saved_tokenizer(data) if data is not None else None, data)

    # --- training ------------------------------------------------------------------------------------
    @abstractmethod
    def trainer(self, model, cfg, run):
        """What trains this task's model into `run` (an object with `fit(resume) -> TrainResult`)."""

    # --- commands -----------------------------------------------------------------------------------
    @abstractmethod
    def evaluate_file(self, model, path: str, bootstrap_samples: int = 0, options=None) -> dict:
        """Metrics on a labelled file (`textnn evaluate`); `options`: the task's `Options` (None: the defaults)."""

    def predict(self, model, examples: list, options) -> list:
        """One `Prediction` per `Example` (`textnn predict`, the Python API), computed and nothing else: the
        front layer (textnn/front.py) reads the input into examples and prints the predictions."""
        raise TextnnError(f"`textnn predict` does not apply to task {self.config.task}")  # type: ignore[attr-defined]

    def predict_chunk_size(self) -> int:
        """Examples `predict` is given at a time: PREDICT_CHUNK_LINES, or more when a larger --batch-size asks
        for fuller batches than that many make."""
        return max(PREDICT_CHUNK_LINES, self.inference_batch_size or 0)

    # --- reading predict input: the task's part of it (the front layer calls these; it answers a blank line
    # itself, and never calls a method for an input format the task does not declare) ---------------------
    def example_from_text(self, line: str, place: str):
        """The Example a line of plain text holds (its line ending removed; never blank), or None when it holds
        nothing to answer; `place` (`file:line`) names it in errors."""
        raise TextnnError(f"`textnn predict` does not apply to task {self.config.task}")  # type: ignore[attr-defined]

    def json_fields(self) -> tuple[str, ...]:
        """The fields a JSON-lines input holds the text in (said on stderr); none: the task reads no JSON lines,
        and a JSON object is for `example_from_text` to read."""
        return ()

    def example_from_json(self, record: dict, place: str):
        """The Example a JSON-lines object holds, or None when it holds nothing to answer."""
        raise NotImplementedError

    def table(self, header: str) -> Table | None:
        """The run's training table when an input's first line (`header`, its line ending removed) is its header
        line (or, for a table without one, a row of it); None otherwise, or when the task reads no table."""
        return None

    def example_from_row(self, fields: list[str], place: str):
        """The Example of a table row, from its fields at `table(...).columns`; None when it holds nothing."""
        raise NotImplementedError

    def conll_examples(self, lines: list[str], source: str, first: int) -> list:
        """The Examples (sentences) of CoNLL lines whose first is line `first` of `source` (reads_conll only)."""
        raise NotImplementedError

    def report_sections(self, metrics: dict, split: str, run_path: Path) -> list[str]:
        """Markdown lines (and plots written into run_path) the task adds to report.md for a split."""
        return []

    def format_metrics(self, metrics: dict) -> list[str]:
        """Lines `textnn evaluate` prints for the metrics of `evaluate`."""
        return [f"{key:>18}: {value:.4f}" if isinstance(value, float) else f"{key:>18}: {value}"
                for key, value in metrics.items()]


class EncodedSplit(Protocol):
    """A split as a task encoded it, which batches itself: what the batching below is written against."""

    def lengths(self) -> list[int]:
        """Each example's length, by which batches group examples of similar length."""

    def collate(self, indices: list[int]) -> Batch:
        """The examples at `indices` as one padded batch (its `index` the same indices)."""


# Training batches are shuffled with a seed made of train.seed and the epoch alone: the same epoch
# gives the same batches, which is what lets a resumed run skip exactly the ones it trained on.
EPOCH_SEED_STRIDE = 100_003


class BatchTask(Task):
    """A task the generic trainer trains by gradient steps over its batches (training/trainer.py).

    Its `splits` map names (train, validation, dev, test) to encoded splits (`EncodedSplit`): the order of
    the training batches, the batches themselves and the evaluation batches are written here once, from
    the splits' `lengths` and `collate`. A task whose training data is not such a split (a language
    model's token stream) gives `train_batches` and `num_train_batches` itself."""

    splits: dict

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def train_order(self, epoch: int) -> list[list[int]]:
        """The epoch's training batches as lists of example indices: length-bucketed, then shuffled."""
        seed = self.config.train.seed * EPOCH_SEED_STRIDE + epoch  # type: ignore[attr-defined]
        return bucket_batches(self.splits["train"].lengths(), self.config.train.batch_size,  # type: ignore[attr-defined]
                              shuffle=True, seed=seed)

    def train_batches(self, epoch: int) -> Iterable:
        """The epoch's training batches (`data.batching.Batch`): the same for the same epoch and seed, which is
        what makes a resume exact."""
        train = self.splits["train"]
        return [train.collate(index) for index in self.train_order(epoch)]

    def num_train_batches(self, epoch: int) -> int:
        """len(train_batches(epoch)) without building them (the trainer plans every epoch)."""
        return len(self.train_order(epoch))

    def eval_batches(self, split: EncodedSplit, batch_size: int = 0) -> list:
        """The split in batches of similar length, sorted by it; results go back to file order by `index`.
        `batch_size` 0: a command's --batch-size, else the task's rule (`pipeline.eval_batch_size`)."""
        size = batch_size or pipeline.eval_batch_size(self.config, self.inference_batch_size)  # type: ignore[attr-defined]
        return [split.collate(index) for index in bucket_batches(split.lengths(), size, shuffle=False)]

    def batches_on_device(self, model, split: EncodedSplit, batch_size: int = 0) -> Iterator[Batch]:
        """`eval_batches(split, batch_size)`, each on the model's device, with the model put in evaluation mode
        first: what every pass that scores a split without training reads."""
        model.eval()
        device = next(model.parameters()).device
        for batch in self.eval_batches(split, batch_size):
            yield batch.to(device)

    def encode_files(self, splits: Iterable[str] = ("dev", "test")) -> None:
        """Encode each of `splits` whose data option (data.dev, data.test, ...) names a file (`encode_file`)."""
        for split in splits:
            path = getattr(self.config.data, split)  # type: ignore[attr-defined]
            if path:
                self.splits[split] = self.encode_file(path)

    @abstractmethod
    def loss(self, model, batch):
        """The SUM of the loss over the batch's `count` terms (a scalar tensor): the trainer divides by the
        count of the whole step, so accumulated micro-batches give the gradient of one big batch."""

    @abstractmethod
    def evaluate(self, model, split, bootstrap_samples: int = 0) -> dict:
        """Metrics (with "loss") on a split name or on what `encode_file` returned."""

    @abstractmethod
    def encode_file(self, path: str, require_labels: bool = True):
        """A data file read as `evaluate` takes it."""

    def trainer(self, model, cfg, run):
        """The generic `Trainer`."""
        from textnn.training.trainer import Trainer

        return Trainer(self, model, cfg, run)

    def evaluate_file(self, model, path: str, bootstrap_samples: int = 0, options=None) -> dict:
        return self.evaluate(model, self.encode_file(path), bootstrap_samples=bootstrap_samples)
