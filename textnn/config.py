"""Typed configuration: dataclasses with a one-line doc per field, YAML files, dotted overrides.

A config file has four sections plus a task name:

    task: classification
    data:  {format: tsv, train: ..., dev: ...}     -> DataConfig
    model: {name: cnn, preset: paper, mode: rand}  -> the family's own Config (registry.ENCODERS)
    train: {optimizer: adadelta, lr: 1.0}          -> TrainConfig

Command-line overrides use dotted keys (`train.lr=3e-4`, `model.hidden_size=256`). Every value is
coerced to the field's declared type, so `1e-3` is a float whether it came from YAML or the shell.
Unknown keys are rejected with a "did you mean". `describe` lists a section's fields with their defaults
and docs, read from the `opt(...)` metadata below, for `textnn explain`.

This module knows the sections' shapes, never which family or task fills them: looking up the classes
a config names, opening its start (model.init_from), applying presets and running the task's checks is
resolution, a step above the tasks (textnn/resolve.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from textnn import limits
from textnn.errors import TextnnError, clip, short
from textnn.files import read_yaml

if TYPE_CHECKING:  # transfer imports torch; the config only holds what resolution opened
    from textnn.transfer import Start

T = TypeVar("T")


def opt(default: object, doc: str, retunable: bool = False) -> Any:
    """Declare a config field with its default and the one-line doc `textnn explain` prints.

    `retunable`: a model setting that shapes no weight and that training may change (a dropout rate,
    a regulariser's weight), so a run starting from another (model.init_from) may set it anew, as
    fine-tuning usually does; every other model setting must equal the starting run's."""
    metadata = {"doc": doc + (" (may differ from the run in model.init_from)" if retunable else ""),
                "retunable": retunable}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def retunable_fields(config_class: type) -> set[str]:
    """The fields of a model Config that a run may change from the run it starts from (`opt(retunable=True)`)."""
    return {f.name for f in dataclasses.fields(config_class) if f.metadata.get("retunable")}


@dataclass
class DataConfig:
    """Data options every task has; each task extends this with its own (tasks/*.py, `data_config`)."""

    format: str = opt("tsv", "input format of the data files (the task lists the formats it reads)")
    train: str = opt("", "training file (a directory for class_files)")
    dev: str = opt("", "development file used for evaluation, early stopping and best-checkpoint selection; with data.validation or data.validation_split, evaluated once instead, on the kept weights")
    test: str = opt("", "optional test file, evaluated once with the best checkpoint at the end")
    validation: str = opt("", "validation file the run selects on (best checkpoint, early stopping, train.metric) instead of data.dev, which is then evaluated once, on the kept weights, as data.test is (classification)")
    validation_split: float = opt(0.0, "hold out this share of data.train, drawn with train.seed (run.json records which rows), as the validation set the run selects on instead of data.dev; 0 = off (classification)")
    encoding: str = opt("utf-8", "text encoding of the data files")
    tokenizer: str = opt("word", "word (regex words and punctuation; words of any script whole, with their combining marks (NFC); English negation as PTB writes it, \"do n't\", whatever the source or apostrophe, and WikiText's @-@ markers as the mark), whitespace, char, bpe (byte-level BPE trained on data.train; language modelling) or wordpiece (BERT's sub-words, trained on data.train or read from model.init_from)")
    lowercase: bool = opt(False, "lower-case text before tokenizing")
    min_freq: int = opt(1, "keep tokens seen at least this often in training")
    max_vocab: int = opt(0, "keep at most this many tokens (most frequent first); 0 = no limit")
    cache: bool = opt(True, "cache tokenized data (keyed by file content and tokenizer settings)")

    # Options that fix how text becomes ids: with model.init_from they come from the starting run.
    TOKENIZATION = ("tokenizer", "lowercase", "min_freq", "max_vocab")

    def __post_init__(self) -> None:
        # a path written as ~/data/train.tsv means the user's home, as it would in a shell
        self.train, self.dev, self.test, self.validation = (
            os.path.expanduser(p) for p in (self.train, self.dev, self.test, self.validation))
        _check(0 <= self.validation_split < 1, "data.validation_split", self.validation_split,
               "a share of data.train below 1 (e.g. 0.1); 0 = off")
        _check(not (self.validation and self.validation_split), "data.validation_split", self.validation_split,
               "0 when data.validation names a file (one validation set or the other)")
        _check(self.tokenizer in ("word", "whitespace", "char", "bpe", "wordpiece"), "data.tokenizer", self.tokenizer,
               "word, whitespace, char, bpe or wordpiece")
        _check(self.min_freq >= 1, "data.min_freq", self.min_freq, "an integer >= 1")
        _check(self.max_vocab >= 0, "data.max_vocab", self.max_vocab, "an integer >= 0")

    def files(self, path: str) -> list[Path]:
        """The files the task reads for a split's data path (data.train, data.dev), those that exist: the
        file itself; a task with a format that reads several files for one path (a folder, a prefix) says
        which. `--resume` checks these (data/fingerprint.py)."""
        return [Path(path)] if path and os.path.isfile(path) else []


@dataclass
class WordVectorData(DataConfig):
    """Data options of the tasks that can start their word embeddings from pretrained vectors."""

    vectors: str = opt("", "pretrained word vectors: word2vec text/.bin, GloVe text (.gz ok), fastText .vec")
    vectors_std: float = opt(0.0, "rescale the pretrained vectors to this standard deviation; 0 = keep the file's scale (50-d GloVe: 0.69, random embeddings: D^-0.5)")
    vectors_vocab: bool = opt(False, "also add every word of data.vectors to the vocabulary, so words never seen in training keep their pretrained vector")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.vectors = os.path.expanduser(self.vectors)
        _check(self.vectors_std >= 0, "data.vectors_std", self.vectors_std, "a number >= 0")


@dataclass
class TableData:
    """How a tsv or csv data file is read, for the tasks that read tables (classification, and language
    modelling's text column): mixed into their data options."""

    header: bool = opt(True, "tsv/csv: the first line names the columns")
    quoting: bool = opt(False, "tsv/csv: honour \" quoting (GLUE files need it off)")
    delimiter: str = opt("", "tsv/csv field separator; empty means tab for tsv, comma for csv")


@dataclass
class ModelOptions:
    """What every model family's Config dataclass is (models/*.py, `Encoder.config_class`): the `model:`
    section, checked in its `__post_init__`."""


@dataclass
class HeadOptions:
    """What every task's head options dataclass is (`Task.head_config`): the `head:` section."""


@dataclass
class NoHeadOptions(HeadOptions):
    """A task whose head has no options."""


@dataclass(frozen=True)
class PresetHead:
    """Head options a family's preset was published with (Kim's dropout and max-norm, a tagger's CRF);
    None = the task's own default. A task takes those its head has, and values given in `head:` win."""

    dropout: float | None = None
    max_norm: float | None = None
    hidden: int | None = None
    output: str | None = None
    constrained: bool | None = None
    softmax: str | None = None
    cutoffs: tuple[int, ...] | None = None
    div_value: float | None = None

    def given(self) -> dict:
        """The options this preset sets, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Preset:
    """A named setting of a model family (`PRESETS` in models/*.py): every model option, as the family's own
    Config, and the head options it was published with. Values given in the config win over both."""

    model: ModelOptions
    head: PresetHead = PresetHead()

    def options(self, **changes: object) -> ModelOptions:
        """A copy of the preset's model options, with `changes` (checked as the family checks any value)."""
        return dataclasses.replace(self.model, **changes)


@dataclass
class TrainConfig:
    optimizer: str = opt("adam", "sgd, adam, adamw, adadelta (fused AdamW on CUDA) or ntasgd (non-monotonically triggered averaged SGD, Merity et al. 2018)")
    ntasgd_nonmono: int = opt(5, "ntasgd: start averaging once dev has not improved on the best of all but the last N evaluations")
    lr: float = opt(1e-3, "peak learning rate")
    weight_decay: float = opt(0.0, "weight decay (decoupled for adamw, L2 otherwise)")
    no_decay: bool = opt(False, "no weight decay on biases, norm weights (every parameter with fewer than 2 dimensions) and embedding tables")
    momentum: float = opt(0.0, "sgd momentum")
    adadelta_rho: float = opt(0.95, "adadelta decay rate (Zeiler 2012; Kim 2014 used 0.95)")
    adam_beta1: float = opt(0.9, "adam, adamw: decay of the gradient's running mean (ULMFiT used 0.7, Howard & Ruder 2018 section 4)")
    adam_beta2: float = opt(0.999, "adam, adamw: decay of the squared gradient's running mean (ULMFiT: 0.99)")
    layer_lr_decay: float = opt(1.0, "discriminative learning rates: the layer group k levels below the head trains at lr * decay^k (ULMFiT: 1/2.6 = 0.3846, Howard & Ruder 2018 section 3.2; BERT fine-tuning e.g. 0.95); 1 = off")
    unfreeze: int = opt(0, "gradual unfreezing (Howard & Ruder 2018 section 3.3): only the head trains at first, and one more layer group from the top joins every N train.unfreeze_unit; 0 = off")
    unfreeze_unit: str = opt("epoch", "what train.unfreeze counts: epoch or step")
    scheduler: str = opt("constant", "constant, linear (warmup then linear decay to 0), triangular (slanted triangular, Howard & Ruder 2018) or inverse_sqrt (linear warmup to train.lr, then lr * sqrt(warmup / step): Vaswani et al. 2017 eq. 3)")
    warmup_steps: int = opt(0, "linear, inverse_sqrt: steps of linear warmup (inverse_sqrt needs >= 1); triangular: steps of the rising edge (0 = train.stlr_cut_frac of training)")
    stlr_cut_frac: float = opt(0.1, "triangular: the fraction of training the rate rises over, unless train.warmup_steps is set (ULMFiT's cut_frac, Howard & Ruder 2018 eq. 3)")
    stlr_ratio: float = opt(32.0, "triangular: how much smaller the lowest rate is than train.lr (ULMFiT's ratio, eq. 3)")
    epochs: int = opt(10, "passes over the training data")
    max_steps: int = opt(0, "stop after this many optimizer steps; 0 = no limit")
    max_minutes: float = opt(0.0, "stop after this many minutes of training; 0 = no limit")
    batch_size: int = opt(32, "examples per micro-batch (language models: parallel streams)")
    grad_accum: int = opt(1, "micro-batches per optimizer step; the loss is normalised over all of them")
    clip_norm: float = opt(0.0, "clip the global gradient norm to this value; 0 = off")
    max_bad_steps: int = opt(5, "a step whose training loss is not finite is skipped; stop after this many in a row")
    eval_every: int = opt(0, "evaluate on dev every N optimizer steps; 0 = at the end of each epoch")
    metric: str = opt("", "dev metric for early stopping and best checkpoint; empty = the task's default")
    patience: int = opt(0, "stop after this many evaluations without improvement; 0 = never")
    checkpoint_every: int = opt(0, "write a resumable checkpoint every N steps; 0 = at every evaluation")
    keep_checkpoint: str = opt("none", "what a run keeps of its checkpoints (each holds the weights and the optimizer state, often three times the weights' size together): none (checkpoint/ is removed once the run has finished; its best weights stay in model.safetensors, a new run can start from them with model.init_from, but --resume cannot continue it), last (checkpoint/last.safetensors, the latest, is kept: one checkpoint's size, and --resume can train the run further) or all (also every checkpoint written, at train.checkpoint_every steps or each evaluation, as checkpoint/step-NNNNNN.safetensors, never removed: one checkpoint's size per checkpoint written; --resume still continues from the latest)")
    seed: int = opt(0, "random seed for initialisation, shuffling and dropout")
    device: str = opt("auto", "auto (cuda when available), cpu, or cuda[:N]")
    precision: str = opt("auto", "auto (bf16 autocast where the hardware multiplies bf16 natively: a CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX; float32 elsewhere), fp32, or bf16 (refused where not native); weights and optimizer state stay float32. Also what evaluate, predict and generate use")
    compile: bool = opt(False, "torch.compile the model")
    log_every: int = opt(50, "write a training-loss record to metrics.jsonl every N steps, and before that at steps 1, 2, 4, 8, ... and at the last step")
    bootstrap_samples: int = opt(1000, "bootstrap resamples for the dev metric's 95% confidence interval; 0 = off")
    threads: int = opt(0, "CPU threads for torch; 0 = torch's default")
    progress: bool = opt(True, "show a progress bar")
    tensorboard: bool = opt(True, "also write the run's numbers (loss, learning rates, throughput, dev metrics) as TensorBoard event files in RUN/tensorboard: `tensorboard --logdir runs`")

    def __post_init__(self) -> None:
        # Every value is checked here, before any data is read or a run directory made: a value that
        # torch would reject, or that would only fail mid-run (a NaN budget), must not leave a
        # half-made run behind.
        _check(self.optimizer in OPTIMIZERS, "train.optimizer", self.optimizer, ", ".join(OPTIMIZERS))
        _check(self.scheduler in SCHEDULERS, "train.scheduler", self.scheduler, ", ".join(SCHEDULERS))
        _check(math.isfinite(self.lr) and self.lr > 0, "train.lr", self.lr, "a finite number > 0")
        for name in ("epochs", "batch_size", "grad_accum", "max_bad_steps"):
            _check(getattr(self, name) >= 1, f"train.{name}", getattr(self, name), "an integer >= 1")
        for name in ("max_steps", "eval_every", "patience", "checkpoint_every", "warmup_steps",
                     "bootstrap_samples", "threads", "ntasgd_nonmono", "unfreeze"):
            _check(getattr(self, name) >= 0, f"train.{name}", getattr(self, name), "an integer >= 0")
        _check(self.bootstrap_samples <= limits.MAX_BOOTSTRAP, "train.bootstrap_samples", self.bootstrap_samples,
               f"an integer <= {limits.MAX_BOOTSTRAP:,} (the input-size limit: see `textnn explain limits`)")
        for name in ("weight_decay", "clip_norm", "max_minutes"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, f"train.{name}", value, "a finite number >= 0")
        for name in ("momentum", "adadelta_rho"):
            value = getattr(self, name)
            _check(0 <= value <= 1, f"train.{name}", value, "a number in [0, 1]")
        for name in ("adam_beta1", "adam_beta2"):  # torch refuses 1 and above, and negatives
            value = getattr(self, name)
            _check(0 <= value < 1, f"train.{name}", value, "a number in [0, 1)")
        _check(0 < self.layer_lr_decay <= 1, "train.layer_lr_decay", self.layer_lr_decay,
               "a number in (0, 1]; 1 = the same learning rate for every layer")
        _check(self.scheduler != "inverse_sqrt" or self.warmup_steps >= 1, "train.warmup_steps", self.warmup_steps,
               "an integer >= 1 with train.scheduler=inverse_sqrt (the step at which the rate peaks; the "
               "Transformer used 4000)")
        _check(0 < self.stlr_cut_frac < 1, "train.stlr_cut_frac", self.stlr_cut_frac, "a fraction in (0, 1)")
        _check(math.isfinite(self.stlr_ratio) and self.stlr_ratio >= 1, "train.stlr_ratio", self.stlr_ratio,
               "a finite number >= 1 (1 = no rise or fall)")
        _check(self.precision in PRECISIONS, "train.precision", self.precision, ", ".join(PRECISIONS))
        _check(self.keep_checkpoint in ("none", "last", "all"), "train.keep_checkpoint", self.keep_checkpoint,
               "none, last or all")
        _check(self.unfreeze_unit in ("epoch", "step"), "train.unfreeze_unit", self.unfreeze_unit, "epoch or step")
        _check(bool(DEVICE.fullmatch(self.device)), "train.device", self.device, "auto, cpu, cuda or cuda:N")
        _check(self.log_every >= 1, "train.log_every", self.log_every, "an integer >= 1")
        # NumPy takes seeds in [0, 2^32); torch crashes creating some hundred thousand threads. The bound
        # is fixed, not the cores of this machine, so a run's config.yaml loads wherever the run is copied.
        _check(0 <= self.seed < 2 ** 32, "train.seed", self.seed, f"an integer in [0, {2 ** 32 - 1}]")
        _check(self.threads <= MAX_THREADS, "train.threads", self.threads,
               f"an integer in [0, {MAX_THREADS}] (0 = torch's default; this machine has {os.cpu_count()} cores)")


OPTIMIZERS = ("sgd", "adam", "adamw", "adadelta", "ntasgd")
SCHEDULERS = ("constant", "linear", "triangular", "inverse_sqrt")
PRECISIONS = ("auto", "fp32", "bf16")  # training/precision.py decides what auto means on the hardware at hand
DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
MAX_THREADS = 1024


@dataclass
class Config:
    """A fully resolved experiment: what `train` saves as config.yaml and every command reads back."""

    task: str
    model_name: str
    model_preset: str
    model: ModelOptions  # the family's Config dataclass
    data: DataConfig  # the task's DataConfig subclass
    train: TrainConfig
    head: HeadOptions = field(default_factory=NoHeadOptions)  # the task's head options dataclass
    name: str = ""
    init_from: str = ""  # model.init_from: a run (or Hugging Face) directory whose encoder, tokenizer and vocabulary start this run
    # init_from opened while this config was resolved (textnn/resolve.py), read once by whoever needs it; None
    # for a config read back from a run (whose own files hold what it took from its start). Not saved.
    start: Start | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        model = {"name": self.model_name, "preset": self.model_preset, **dataclasses.asdict(self.model)}
        if self.init_from:
            model["init_from"] = self.init_from
        return {
            "name": self.name,
            "task": self.task,
            "data": dataclasses.asdict(self.data),
            "model": model,
            "head": dataclasses.asdict(self.head),
            "train": dataclasses.asdict(self.train),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------------------------------
# Building a Config from YAML + overrides


def _check(ok: bool, key: str, value: object, expected: str) -> None:
    if not ok:
        raise TextnnError(f"config key {key}: got {short(value)}, expected {expected}; fix the value "
                          f"(`textnn explain {key.split('.')[0]}` lists the options)")


def check_key(ok: bool, key: str, value: object, expected: str) -> None:
    """For a config dataclass's `__post_init__`: raise a TextnnError naming `key` (section.name) unless `ok`."""
    _check(ok, key, value, expected)


def check_model_field(ok: bool, key: str, value: object, expected: str) -> None:
    """For a model Config's `__post_init__`: raise a TextnnError naming `model.<key>` unless `ok`."""
    _check(ok, f"model.{key}", value, expected)


def is_int(value: object) -> bool:
    """An int that is not a bool (True is an int to Python, never a size to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def did_you_mean(key: object, valid: list[str]) -> str:
    # a key far longer than any valid one is no typo of it (and difflib is quadratic in its length)
    if not isinstance(key, str) or len(key) > 2 * max(map(len, valid), default=0):
        return ""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? " if close else ""


def coerce(value: object, typ: object, key: str, origin: str) -> object:
    """Convert `value` (from YAML or a `key=value` string) to the declared type of a field."""
    def bad(expected: str) -> TextnnError:
        return TextnnError(f"{origin}: {key} expects {expected}, got {short(value)}; fix the value "
                           f"(see `textnn explain {key.split('.')[0]}`)")

    if typ in (bool, "bool"):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "on", "1"):
            return True
        if text in ("false", "no", "off", "0"):
            return False
        raise bad("true or false")
    if typ in (int, "int"):
        if isinstance(value, bool):
            raise bad("an integer")
        try:
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            return int(number)
        except (TypeError, ValueError):
            raise bad("an integer") from None
    if typ in (float, "float"):
        if isinstance(value, bool):
            raise bad("a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise bad("a number") from None
    if typ in (str, "str"):
        if isinstance(value, (dict, list)):
            raise bad("a string")
        return "" if value is None else str(value)
    origin_type = typing.get_origin(typ)
    if origin_type in (list, tuple):
        (item_type, *_) = typing.get_args(typ) or (str,)
        if isinstance(value, str):
            value = [part for part in value.replace("[", "").replace("]", "").split(",") if part.strip()]
        if not isinstance(value, (list, tuple)):
            raise bad("a list")
        items = [coerce(item, item_type, key, origin) for item in value]
        return tuple(items) if origin_type is tuple else items
    return str(value) if isinstance(value, CommandLineValue) else value  # a plain str for yaml.safe_dump


class CommandLineValue(str):
    """A value given as a `section.key=value` override, so errors blame where it was given (`given_in`: the
    command line, or a sweep file's overrides), not the config file."""

    given_in = "command line"


def _given(value: str, given_in: str) -> CommandLineValue:
    marked = CommandLineValue(value)
    marked.given_in = given_in
    return marked


def origin_of(value: object, origin: str) -> str:
    return value.given_in if isinstance(value, CommandLineValue) else origin


def build_dataclass(cls: type[T], values: dict, section: str, origin: str, explain_as: str = "") -> T:
    """Instantiate `cls` from a dict, coercing each value and rejecting unknown keys (the error points to
    `textnn explain <explain_as or section>`)."""
    if not isinstance(values, dict):
        raise TextnnError(f"{origin}: section '{section}' must be a mapping of keys to values, got {short(values)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {}
    for key, value in values.items():
        if key not in names:
            raise TextnnError(f"{origin_of(value, origin)}: unknown key {section}.{clip(key)}; "
                              f"{did_you_mean(key, names)}run `textnn explain {explain_as or section}` to list "
                              f"the valid keys")
        kwargs[key] = coerce(value, hints[key], f"{section}.{key}", origin_of(value, origin))
    try:
        return cls(**kwargs)
    except TextnnError as err:
        raise TextnnError(f"{origin}: {err}") from None


SECTIONS = ("name", "task", "data", "model", "head", "train")


def apply_overrides(raw: dict, overrides: list[str], given_in: str = "command line") -> dict:
    """Apply `section.key=value` overrides to a raw config dict (values stay strings until coerced); errors
    about them name `given_in`, where they were given."""
    for item in overrides:
        if "=" not in item:
            raise TextnnError(f"{given_in}: override {short(item)} must look like section.key=value (e.g. "
                              f"train.lr=3e-4)")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if parts[0] not in SECTIONS:
            raise TextnnError(f"{given_in}: unknown section {short(parts[0], 40)} in {short(item)}; "
                              f"{did_you_mean(parts[0], list(SECTIONS))}valid: {', '.join(SECTIONS)}")
        if len(parts) == 1:
            raw[parts[0]] = _given(value, given_in)
        elif len(parts) == 2:
            section = raw.setdefault(parts[0], {})
            if not isinstance(section, dict):
                raise TextnnError(f"{given_in}: '{parts[0]}' is not a section; cannot set {short(key)}")
            section[parts[1]] = _given(value, given_in)
        else:
            raise TextnnError(f"{given_in}: {short(key)} is nested too deeply; use section.key=value")
    return raw


def _renamed_train_keys(train_raw: object) -> object:
    """The train section with its old keys in their new form: `amp` (bf16 autocast on CUDA, ignored on
    the CPU), which runs written before train.precision hold, is read as precision auto (true) or fp32."""
    if not isinstance(train_raw, dict) or "amp" not in train_raw:
        return train_raw
    renamed = {key: value for key, value in train_raw.items() if key != "amp"}
    if "precision" not in renamed:
        amp = coerce(train_raw["amp"], bool, "train.amp", "config")
        renamed["precision"] = "auto" if amp else "fp32"
    return renamed


def read_raw(path: str | Path, overrides: list[str] | None = None, given_in: str = "command line") -> dict:
    """A YAML config with dotted overrides applied (given in `given_in`, which errors about them name), not yet
    resolved (textnn/resolve.py `load_config`); relative data paths stay as written."""
    return apply_overrides(read_yaml(path), list(overrides or []), given_in)


def build_train(train_raw: object, origin: str) -> TrainConfig:
    """The train section (of a config file, or a run's config.yaml) as a TrainConfig, old keys renamed."""
    return build_dataclass(TrainConfig, _renamed_train_keys(train_raw or {}), "train", origin)


def check_run_name(name: object, origin: str) -> str:
    """A run name (`name:`, or the config's file name): one plain folder name, so runs/<name> stays in runs/."""
    if not isinstance(name, str):
        raise TextnnError(f"{origin}: name must be a string (the run's folder name), got "
                          f"{short(name, 40)} (of type {type(name).__name__}); quote it")
    if name and (len(name) > 100 or name in (".", "..") or any(c in name for c in '/\\\0') or name != name.strip()
                 or not name.isprintable()):
        raise TextnnError(f"{origin}: name {short(name, 40)} is not a plain folder name (it becomes runs/<name>); "
                          f"use letters, digits, '-', '_' or '.', without '/', and at most 100 characters")
    return str(name)  # a plain str, not a CommandLineValue, for yaml.safe_dump


# --------------------------------------------------------------------------------------------------
# `textnn explain`


def describe(cls: type, section: str, fields: list | None = None) -> list[str]:
    """One line per field (all of `cls`'s, or the given ones): key, type, default and doc."""
    hints = typing.get_type_hints(cls)
    lines = []
    for f in fields if fields is not None else dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        typ = getattr(hints[f.name], "__name__", str(hints[f.name]))
        lines.append(f"  {section}.{f.name:<22} {typ:<6} default={default!r:<12} {f.metadata.get('doc', '')}")
    return lines
