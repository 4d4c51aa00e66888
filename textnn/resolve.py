"""Resolution: a raw config (YAML + overrides, textnn/config.py) becomes the typed Config a run is made of.

config.py knows the sections' shapes; this step, above the tasks, knows what fills them:

  - the classes a config names: its task (registry.TASKS) and model family (registry.ENCODERS), and whether
    the family can serve the task;
  - the start in model.init_from, opened once (transfer.Start): a run's family, model settings, tokenization
    options and, for a task that keeps it, its head come from there, and values given beside it must agree
    (only the `retunable` ones may change);
  - the family's preset (models/*.py PRESETS): its model options under the values given, its head options
    under those of `head:`;
  - the task's own checks (`Task.check_config`), run on the typed config before any data is read.

Every command reads configs through here: `load_config` (a config file), `config_from_dict` (a raw dict),
`run_config` (a run's saved config.yaml). `explain` is here too: listing what each task and family takes
is the same lookup.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from textnn import limits, registry, transfer
from textnn.config import (
    SECTIONS,
    Config,
    DataConfig,
    ModelOptions,
    TrainConfig,
    build_dataclass,
    build_train,
    check_run_name,
    describe,
    did_you_mean,
    origin_of,
    read_raw,
    retunable_fields,
)
from textnn.errors import TextnnError, short
from textnn.runs import RunDir


def load_config(path: str | Path, overrides: list[str] | None = None, given_in: str = "command line") -> Config:
    """Read a YAML config, apply dotted overrides (given in `given_in`, which errors about them name) and
    resolve it; relative data paths stay as written. A config without `name:` is named after its file."""
    config = config_from_dict(read_raw(path, overrides, given_in), str(path))
    if not config.name:
        config.name = check_run_name(Path(path).stem, f"{path}: the config's file name")
    return config


def run_config(run: RunDir) -> Config:
    """A run's saved config.yaml, resolved as saved: its start is not opened again (the run's own files hold
    what it took from there), so the starting run need not exist."""
    return config_from_dict(run.raw_config(), str(run.config_file), resolve_init=False)


def config_from_dict(raw: dict, origin: str, resolve_init: bool = True) -> Config:
    """Resolve a raw dict (from YAML + overrides) into a typed Config.

    With `model.init_from: RUN_DIR` the model section needs nothing else: the family, its settings
    and the tokenization options come from that run's config.yaml (values given beside it must agree).
    `resolve_init=False` reads a saved, already resolved config (the starting run need not exist).
    """
    unknown = [key for key in raw if key not in SECTIONS]
    if unknown:
        raise TextnnError(f"{origin}: unknown section {short(unknown[0], 40)}; {did_you_mean(unknown[0], list(SECTIONS))}"
                          f"valid: {', '.join(SECTIONS)}")
    task = str(raw.get("task") or "classification")
    try:  # a saved run's (resolve_init False) own task module is never imported from the run's folder
        task_cls = registry.task_class(task, saved_in=None if resolve_init else Path(origin).parent)
    except TextnnError as err:
        raise TextnnError(f"{origin_of(raw.get('task'), origin)}: task: {err}") from None
    if not isinstance(raw.get("model") or {}, dict):
        raise TextnnError(f"{origin}: section 'model' must be a mapping of keys to values, got "
                          f"{short(raw.get('model'), 40)}")
    model_raw = dict(raw.get("model") or {})
    data_raw = dict(raw.get("data") or {}) if isinstance(raw.get("data") or {}, dict) else raw.get("data")
    init_from = os.path.expanduser(str(model_raw.pop("init_from", "") or ""))
    if resolve_init and isinstance(data_raw, dict) and data_raw.get("features_from") \
            and "features_from" in {f.name for f in dataclasses.fields(task_cls.data_config)}:
        # a Hugging Face model id: its cached checkpoint, as for model.init_from below
        data_raw["features_from"] = transfer.resolve_start(os.path.expanduser(str(data_raw["features_from"])),
                                                           origin, "data.features_from")
    start_head: dict | None = None  # the starting run's head options, when this run takes its head
    opened = None  # the start in model.init_from, opened once
    if init_from and resolve_init:
        opened = transfer.open_start(init_from, origin)  # a Hugging Face model id: its cached checkpoint
        init_from = str(opened.path)
        start = opened.config
        start_model = dict(start.get("model") or {})
        start_model.pop("init_from", None)
        start_name = str(start_model.get("name") or "")
        retunable = retunable_fields(registry.encoder_class(start_name).config_class) \
            if start_name in registry.ENCODERS else set()
        model_raw = _inherit(model_raw, start_model, "model", origin, init_from, retunable=retunable)
        start_data = start.get("data") or {}
        if isinstance(data_raw, dict):
            tokenization = {k: start_data[k] for k in task_cls.data_config.TOKENIZATION if k in start_data}
            data_raw = _inherit(data_raw, tokenization, "data", origin, init_from)
            if data_raw.get("vectors"):
                raise TextnnError(f"{origin}: data.vectors and model.init_from are both set; the embeddings come "
                                  f"from the run in model.init_from, so remove data.vectors")
        if takes_start_head(task, start) and isinstance(start.get("head"), dict):
            start_head = start["head"]
    name_value = model_raw.pop("name", "")
    model_name = str(name_value or "")
    if not model_name:
        raise TextnnError(f"{origin}: model.name is missing; choose one of {', '.join(registry.models_for(task))}"
                          f" (or start from a run: model.init_from)")
    if model_name not in registry.ENCODERS:
        raise TextnnError(f"{origin_of(name_value, origin)}: model.name: "
                          f"{registry.unknown_name('model', model_name, registry.models_for(task))}")
    encoder_cls = registry.encoder_class(model_name)
    reason = task_cls.unusable_reason(encoder_cls)
    if reason:
        raise TextnnError(f"{origin_of(name_value, origin)}: model.name: {model_name} cannot serve task {task}: "
                          f"{reason}; models for {task}: {', '.join(registry.models_for(task))}")
    presets = encoder_cls.presets
    preset_value = model_raw.pop("preset", "")
    preset = str(preset_value or "")
    if preset and preset not in presets:
        raise TextnnError(f"{origin_of(preset_value, origin)}: model.preset: "
                          f"{registry.unknown_name(f'preset of model {model_name!r}', preset, list(presets))}")
    # A preset may also set the head it was published with (Kim's dropout and max-norm, say); the task
    # takes the options its head has, and values given in `head:` win.
    preset_model = _option_values(presets[preset].model) if preset else {}
    preset_head = presets[preset].head.given() if preset else {}
    head_raw = raw.get("head") or {}
    if not isinstance(head_raw, dict):
        raise TextnnError(f"{origin}: section 'head' must be a mapping of keys to values, got {short(head_raw)}")
    head_names = {f.name for f in dataclasses.fields(task_cls.head_config)}
    head_values = {**{k: v for k, v in preset_head.items() if k in head_names}, **head_raw}
    if start_head is not None:  # its weights come from the starting run, so its options do too
        head_values = _inherit(head_raw, start_head, "head", origin, init_from, "the head comes")
    model = build_dataclass(encoder_cls.config_class, {**preset_model, **model_raw}, "model", origin)
    data = build_dataclass(task_cls.data_config, data_raw, "data", origin, explain_as=task)
    head = build_dataclass(task_cls.head_config, head_values, "head", origin, explain_as=task)
    train = build_train(raw.get("train"), origin)
    config = Config(task=task, model_name=model_name, model_preset=preset, model=model, data=data,
                    train=train, head=head, name=check_run_name(raw.get("name") or "", origin_of(raw.get("name"), origin)),
                    init_from=init_from, start=opened)
    task_cls.check_config(config)
    return config


def _option_values(options: ModelOptions) -> dict:
    """Every field of a preset's model options, by name: the values a config's own then replace (each is
    coerced again with them, so a preset gives what the same values written in the config would)."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


def _inherit(given: dict, inherited: dict, section: str, origin: str, init_from: str,
             what: str = "the encoder and its inputs come", retunable: set[str] = frozenset()) -> dict:
    """`inherited` values with `given` checked against them: a value given beside model.init_from must
    equal the starting run's, since the weights were trained with it; only the `retunable` keys
    (dropout rates and the like) may take a new value."""
    for key, value in given.items():
        if key in inherited and key not in retunable and str(inherited[key]) != str(value):
            free = f" (only {', '.join(sorted(retunable))} may change)" if retunable else ""
            raise TextnnError(f"{origin_of(value, origin)}: {section}.{key}={short(value)} differs from the run in "
                              f"model.init_from={init_from} ({inherited[key]!r}); remove it: {what} from that "
                              f"run{free}")
    return {**inherited, **{key: value for key, value in given.items() if key in retunable or key not in inherited}}


def takes_start_head(task: str, start: dict) -> bool:
    """Whether a run of `task` starting from the run whose raw config is `start` takes its head too
    (weights and head options): the same task, one whose head follows from what it inherits
    (`Task.keeps_start_head`: a language model's output layer scores the inherited vocabulary)."""
    return registry.task_class(task).keeps_start_head and start.get("task") == task


def starts_with_head(config: Config) -> bool:
    """Whether `config` starts from a run (model.init_from) whose head it takes too (`takes_start_head`)."""
    start = config.start
    return start is not None and start.is_run and takes_start_head(config.task, start.config)


# --------------------------------------------------------------------------------------------------
# `textnn explain`


def explain(section: str = "") -> str:
    """Text for `textnn explain [SECTION]`: SECTION is task, data, head, train, model, limits (the input-size
    policy), a task name (its data and head options) or a model name."""
    parts: list[str] = []
    wanted = section.removeprefix("model.") if section else ""
    if section in ("", "task"):
        parts.append("task: " + ", ".join(f"{t} (models: {', '.join(registry.models_for(t))})" for t in registry.TASKS))
    tasks = [section] if section in registry.TASKS else list(registry.TASKS) if section in ("", "data", "head") else []
    if section in ("", "data", *registry.TASKS):
        parts += ["[data] for every task", *describe(DataConfig, "data")]
        common = {(f.name, f.default, f.metadata.get("doc")) for f in dataclasses.fields(DataConfig)}
        for task in tasks:
            own = [f for f in dataclasses.fields(registry.task_class(task).data_config)
                   if (f.name, f.default, f.metadata.get("doc")) not in common]  # its own, or redefined
            parts += [f"[data] task {task}", *describe(registry.task_class(task).data_config, "data", own)]
    if section in ("", "head", *registry.TASKS):
        for task in tasks:
            parts += [f"[head] task {task}", *describe(registry.task_class(task).head_config, "head")]
    if section in registry.TASKS and registry.task_class(section).metric_note:
        parts += [f"[metrics] task {section}", f"  {registry.task_class(section).metric_note}"]
    if section in ("", "train"):
        parts += ["[train]", *describe(TrainConfig, "train")]
    if section in ("", "model") or wanted in registry.ENCODERS:
        parts.append("  model.init_from          str    default=''  a run directory, or a Hugging Face checkpoint "
                     "directory (BERT family, GPT-2) or model id found in the local Hugging Face cache, to start from: "
                     "its encoder weights, tokenizer, vocabulary and model settings (the task adds its head)")
        for name in registry.ENCODERS:
            if wanted and wanted != "model" and wanted != name:
                continue
            config_cls, _, presets = registry.model_entry(name)
            tasks_of = [t for t in registry.TASKS if registry.task_class(t).unusable_reason(registry.encoder_class(name)) is None]
            parts.append(f"[model] name: {name}   tasks: {', '.join(tasks_of)}   presets: {', '.join(presets)}")
            parts += describe(config_cls, "model")
    if section in ("", "limits"):
        parts += limits.describe()
    if not parts:
        valid = ["task", "data", "head", "train", "model", "limits", *registry.TASKS, *registry.ENCODERS]
        raise TextnnError(f"nothing to explain for '{section}'; {did_you_mean(section, valid)}"
                          f"valid: {', '.join(valid)}")
    return "\n".join(parts)
