"""textnn.config and textnn.resolve: YAML + dotted overrides, type coercion, presets, the saved round trip,
`explain`."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from textnn import registry
from textnn.config import TrainConfig, coerce
from textnn.errors import TextnnError
from textnn.files import read_yaml
from textnn.models.base import EncoderDecoder
from textnn.resolve import config_from_dict, explain, load_config, run_config
from textnn.runs import RunDir

BASE = {"task": "classification", "data": {"train": "train.tsv"}, "model": {"name": "cnn"}}


def write_yaml(tmp_path: Path, raw: dict | str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ coercion


def test_scientific_float_is_a_float_from_yaml_and_from_the_command_line(tmp_path):
    # PyYAML (YAML 1.1) reads `1e-3` as the STRING "1e-3"; the declared type makes it a float.
    path = write_yaml(tmp_path, "model: {name: cnn}\ntrain:\n  lr: 1e-3\n  weight_decay: 5e-4\n")
    assert read_yaml(path)["train"]["lr"] == "1e-3"
    config = load_config(path)
    assert type(config.train.lr) is float and config.train.lr == 0.001
    assert type(config.train.weight_decay) is float and config.train.weight_decay == 0.0005
    overridden = load_config(path, ["train.lr=3e-4", "train.clip_norm=1"])
    assert type(overridden.train.lr) is float and overridden.train.lr == 0.0003
    assert type(overridden.train.clip_norm) is float and overridden.train.clip_norm == 1.0


@pytest.mark.parametrize("text,expected", [("true", True), ("True", True), ("yes", True), ("on", True),
                                           ("1", True), ("false", False), ("no", False), ("off", False),
                                           ("0", False)])
def test_booleans_from_the_command_line(tmp_path, text, expected):
    config = load_config(write_yaml(tmp_path, BASE), [f"data.lowercase={text}", f"train.progress={text}"])
    assert config.data.lowercase is expected and config.train.progress is expected


def test_booleans_from_yaml(tmp_path):
    raw = {**BASE, "data": {"train": "t.tsv", "header": False, "lowercase": "yes"}, "train": {"progress": "off"}}
    config = load_config(write_yaml(tmp_path, raw))
    assert config.data.header is False and config.data.lowercase is True and config.train.progress is False


@pytest.mark.parametrize("value", ["maybe", "2", "", "truee"])
def test_a_bool_option_rejects_anything_else(tmp_path, value):
    with pytest.raises(TextnnError, match=r"train\.progress expects true or false"):
        load_config(write_yaml(tmp_path, BASE), [f"train.progress={value}"])


@pytest.mark.parametrize("text,expected", [("3", 3), ("3.0", 3), ("1e1", 10), (" 7 ", 7)])
def test_ints_accept_whole_numbers_in_any_spelling(tmp_path, text, expected):
    config = load_config(write_yaml(tmp_path, BASE), [f"train.epochs={text}"])
    assert type(config.train.epochs) is int and config.train.epochs == expected


@pytest.mark.parametrize("value", ["2.5", "abc", "", "true"])
def test_ints_must_be_whole(tmp_path, value):
    with pytest.raises(TextnnError, match=r"train\.epochs expects an integer"):
        load_config(write_yaml(tmp_path, BASE), [f"train.epochs={value}"])


def test_ints_from_yaml_must_be_whole_too(tmp_path):
    with pytest.raises(TextnnError, match=r"exp\.yaml: train\.batch_size expects an integer, got 16\.5"):
        load_config(write_yaml(tmp_path, {**BASE, "train": {"batch_size": 16.5}}))
    with pytest.raises(TextnnError, match=r"train\.batch_size expects an integer"):
        load_config(write_yaml(tmp_path, {**BASE, "train": {"batch_size": True}}))  # a bool is not a count


def test_a_yaml_bool_is_not_a_number():
    with pytest.raises(TextnnError, match="expects a number"):
        coerce(True, float, "train.lr", "exp.yaml")


def test_a_list_option_from_the_command_line(tmp_path):
    for text in ("2,4", "[2,4]", "[2, 4]"):
        config = load_config(write_yaml(tmp_path, BASE), [f"model.filter_widths={text}"])
        assert config.model.filter_widths == [2, 4] and all(type(w) is int for w in config.model.filter_widths)
    with pytest.raises(TextnnError, match="model.filter_widths expects an integer"):
        load_config(write_yaml(tmp_path, BASE), ["model.filter_widths=2,x"])


def test_string_options_stay_strings(tmp_path):
    # a column given by index is still a string option: "0" must not become the int 0
    config = load_config(write_yaml(tmp_path, {**BASE, "data": {"train": "t.tsv", "text_column": 0}}),
                         ["data.label_column=1"])
    assert config.data.text_column == "0" and config.data.label_column == "1"


def test_values_are_checked_after_coercion(tmp_path):
    with pytest.raises(TextnnError, match=r"train\.lr.*> 0"):
        load_config(write_yaml(tmp_path, BASE), ["train.lr=-1e-3"])
    with pytest.raises(TextnnError, match=r"data\.fold"):
        load_config(write_yaml(tmp_path, BASE), ["data.kfold=5", "data.fold=5"])


@pytest.mark.parametrize("override", ["train.layer_lr_decay=0", "train.layer_lr_decay=1.5", "train.unfreeze=-1",
                                      "train.unfreeze_unit=epochs", "train.max_bad_steps=0",
                                      "train.ntasgd_nonmono=-1", "train.weight_decay=inf", "train.device=cuda0"])
def test_training_options_are_checked_when_the_config_is_read(tmp_path, override):
    key, _, value = override.partition("=")
    with pytest.raises(TextnnError, match=rf"config key {key}: got .*{value}.*; fix the value"):
        load_config(write_yaml(tmp_path, BASE), [override])


def test_parameter_group_options_take_their_documented_values(tmp_path):
    config = load_config(write_yaml(tmp_path, BASE), ["train.no_decay=true", "train.layer_lr_decay=0.3846",
                                                      "train.unfreeze=2", "train.unfreeze_unit=step"])
    train = config.train
    assert (train.no_decay, train.layer_lr_decay, train.unfreeze, train.unfreeze_unit) == (True, 0.3846, 2, "step")
    assert TrainConfig().layer_lr_decay == 1.0 and TrainConfig().unfreeze == 0


# ------------------------------------------------------------------------------------------------ errors


def test_unknown_keys_say_where_they_came_from_and_suggest_the_right_one(tmp_path):
    path = write_yaml(tmp_path, {**BASE, "train": {"lrr": 0.1}})
    with pytest.raises(TextnnError) as from_file:
        load_config(path)
    assert str(from_file.value).startswith(f"{path}: unknown key train.lrr; did you mean 'lr'?")
    with pytest.raises(TextnnError) as from_command_line:
        load_config(write_yaml(tmp_path, BASE), ["train.lrr=0.1"])
    assert str(from_command_line.value).startswith("command line: unknown key train.lrr; did you mean 'lr'?")
    with pytest.raises(TextnnError, match=r"command line: train\.lr expects a number, got 'abc'"):
        load_config(write_yaml(tmp_path, BASE), ["train.lr=abc"])
    with pytest.raises(TextnnError, match=r"unknown key model\.num_filter; did you mean 'num_filters'"):
        load_config(write_yaml(tmp_path, BASE), ["model.num_filter=3"])


@pytest.mark.parametrize("override,message", [
    ("trian.lr=1", r"unknown section 'trian'.*did you mean 'train'"),
    ("train.lr", r"must look like section\.key=value"),
    ("train.lr.x=1", r"nested too deeply"),
    ("model.name=cnnn", r"model\.name: unknown model .*'cnnn'.*did you mean 'cnn'"),
    ("model.preset=tiyn", r"model\.preset: unknown preset .*did you mean 'tiny'"),
    ("task=clasification", r"task: unknown task 'clasification'.*did you mean 'classification'"),
])
def test_bad_overrides(tmp_path, override, message):
    with pytest.raises(TextnnError, match=message):
        load_config(write_yaml(tmp_path, BASE), [override])


def test_unknown_section_and_missing_model_in_yaml(tmp_path):
    with pytest.raises(TextnnError, match=r"exp\.yaml: unknown section 'trian'; did you mean 'train'"):
        load_config(write_yaml(tmp_path, {**BASE, "trian": {"lr": 1}}))
    with pytest.raises(TextnnError, match=r"model\.name is missing; choose one of"):
        load_config(write_yaml(tmp_path, {"data": {"train": "t.tsv"}}))
    with pytest.raises(TextnnError, match=r"exp\.yaml:2: not valid YAML"):
        load_config(write_yaml(tmp_path, "model: {name: cnn}\ntrain: lr: 1\n"))
    with pytest.raises(TextnnError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------------------------ presets


def test_presets_sit_under_explicit_values(tmp_path):
    from textnn.models.cnn import PRESETS, KimCNNConfig

    tiny = PRESETS["tiny"].model
    defaults = KimCNNConfig()
    raw = {**BASE, "model": {"name": "cnn", "preset": "tiny", "num_filters": tiny.num_filters + 3}}
    config = load_config(write_yaml(tmp_path, raw), [f"model.num_filters={tiny.num_filters + 1}",
                                                     f"model.mode={'static' if tiny.mode != 'static' else 'rand'}"])
    assert config.model_preset == "tiny"
    assert config.model.num_filters == tiny.num_filters + 1  # the command line beats the YAML and the preset
    assert config.model.mode != tiny.mode  # the command line beats the preset
    assert config.model.embedding_dim == tiny.embedding_dim != defaults.embedding_dim  # the preset beats defaults
    assert config.model.filter_widths == list(tiny.filter_widths)
    again = load_config(write_yaml(tmp_path, raw))
    assert again.model.num_filters == tiny.num_filters + 3  # the YAML beats the preset


def test_a_preset_chosen_on_the_command_line(tmp_path):
    from textnn.models.cnn import PRESETS

    config = load_config(write_yaml(tmp_path, BASE), ["model.preset=paper"])
    assert config.model == PRESETS["paper"].model
    # the preset's head options (Kim 2014: dropout 0.5, max-norm 3) reach the head section ...
    assert (config.head.dropout, config.head.max_norm) == (PRESETS["paper"].head.dropout,
                                                           PRESETS["paper"].head.max_norm)
    # ... and values given in head: win over them
    assert load_config(write_yaml(tmp_path, BASE), ["model.preset=paper", "head.dropout=0.1"]).head.dropout == 0.1


@pytest.mark.parametrize("model", list(registry.ENCODERS))
def test_every_preset_is_its_familys_options_and_heads_the_tasks_take(model):
    """A preset is typed: its model part is the family's own Config, and each head option it sets is an option
    of the head of some task the family serves, of the same type (PresetHead names no other)."""
    config_cls, encoder_cls, presets = registry.model_entry(model)
    heads = [registry.task_class(task).head_config for task in registry.TASKS if model in registry.models_for(task)]
    for name, preset in presets.items():
        assert type(preset.model) is config_cls, f"{model} preset {name}"
        for key, value in preset.head.given().items():
            takers = [head for head in heads if key in {f.name for f in dataclasses.fields(head)}]
            assert takers, f"{model} preset {name}: head.{key} is an option of no head of the tasks it serves"
            for head in takers:
                typ = typing.get_type_hints(head)[key]
                assert isinstance(value, typing.get_origin(typ) or typ) or typing.get_origin(typ) is list \
                    and isinstance(value, tuple), f"{model} preset {name}: head.{key}={value!r} is no {typ}"


def test_a_preset_does_not_change_what_a_config_that_names_it_resolves_to(tmp_path):
    """Applying a preset is writing its values into the config: the same config with every value of the
    preset written out resolves to the same options, model and head."""
    from textnn.models.tagger import PRESETS

    named = config_from_dict({"task": "tagging", "data": {"train": "t"}, "model": {"name": "rnn_tagger",
                                                                                   "preset": "ma_hovy"}}, "x.yaml")
    preset = PRESETS["ma_hovy"]
    written = config_from_dict({"task": "tagging", "data": {"train": "t"}, "head": preset.head.given(),
                                "model": {"name": "rnn_tagger", **dataclasses.asdict(preset.model)}}, "x.yaml")
    assert (named.model, named.head) == (written.model, written.head)
    assert named.model is not preset.model  # the preset itself is never handed out to be changed


# ------------------------------------------------------------------------------------------------ round trip


def _every_model() -> list[tuple[str, str, str]]:
    return [(task, model, preset) for task in registry.TASKS for model in registry.models_for(task)
            for preset in ["", *registry.model_entry(model)[2]]]


@pytest.mark.parametrize("task,model,preset", _every_model())
def test_saved_config_yaml_round_trips_to_an_equal_config(tmp_path, task, model, preset):
    data = {"train": "t.tsv", "lowercase": True, "max_vocab": 500, **({"bptt": 8} if task == "language_modeling" else {})}
    raw = {"name": "exp", "task": task, "data": data,
           "model": {"name": model, "preset": preset}, "train": {"lr": "2e-4", "epochs": 3, "precision": "fp32"}}
    config = config_from_dict(raw, "exp.yaml")
    saved = tmp_path / "config.yaml"
    saved.write_text(config.to_yaml(), encoding="utf-8")
    again = config_from_dict(read_yaml(saved), str(saved))
    assert again == config
    assert dataclasses.asdict(again.model) == dataclasses.asdict(config.model)


def test_run_directory_config_round_trips_with_overrides(tmp_path):
    # overrides arrive as strings from the shell; what the run saves must read back identically
    config = load_config(write_yaml(tmp_path, BASE), ["train.lr=1e-3", "model.filter_widths=2,3",
                                                      "data.lowercase=true", "name=custom"])
    run = RunDir(tmp_path / "run")
    run.create(config, resume=False)
    assert run_config(run) == config
    assert run_config(run).name == "custom"


def test_config_name_defaults_to_the_file_stem(tmp_path):
    assert load_config(write_yaml(tmp_path, BASE, name="my_experiment.yaml")).name == "my_experiment"


# ------------------------------------------------------------------------------------------------ explain


def _sections() -> list[tuple[str, type]]:
    tasks = [registry.task_class(task) for task in registry.TASKS]
    return [("train", TrainConfig), *(("data", task.data_config) for task in tasks),
            *(("head", task.head_config) for task in tasks)] + [
        ("model", registry.model_entry(name)[0]) for name in registry.ENCODERS]


def _line_for(text: str, key: str, doc: str) -> bool:
    return any(line.split()[:1] == [key] and line.rstrip().endswith(doc) for line in text.splitlines())


def test_explain_lists_every_field_of_every_section_with_its_doc():
    text = explain()
    for section, cls in _sections():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            doc = f.metadata.get("doc")
            assert doc, f"{cls.__name__}.{f.name} has no doc"
            assert _line_for(text, f"{section}.{f.name}", doc), f"{section}.{f.name}"
            typ = getattr(hints[f.name], "__name__", str(hints[f.name]))
            assert any(line.split()[:2] == [f"{section}.{f.name}", typ] for line in text.splitlines())
    for name in registry.ENCODERS:
        assert f"[model] name: {name} " in text
    for task in registry.TASKS:
        assert task in text.splitlines()[0]


def test_explain_a_task_shows_its_own_data_and_head_options_only():
    text = explain("tagging")
    assert "data.tag_scheme" in text and "head.output" in text and "data.train" in text
    assert "data.bptt" not in text and "data.text_pair_column" not in text and "head.max_norm" not in text
    assert "[model]" not in text and "[train]" not in text


@pytest.mark.parametrize("name", list(registry.ENCODERS))
def test_explain_one_model_shows_its_fields_and_presets(name):
    config_cls, _, presets = registry.model_entry(name)
    text = explain(name)
    header = [line for line in text.splitlines() if line.startswith("[model]")]
    assert len(header) == 1 and all(preset in header[0] for preset in presets)
    for f in dataclasses.fields(config_cls):
        assert _line_for(text, f"model.{f.name}", f.metadata["doc"])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert f"default={default!r}" in text
    assert "[train]" not in text and "[data]" not in text
    tasks = [task for task in registry.TASKS if name in registry.models_for(task)]
    # Encoder-decoders serve the translation task only; before it is registered they serve none.
    waiting = issubclass(registry.encoder_class(name), EncoderDecoder) and "translation" not in registry.TASKS
    assert (tasks or waiting) and f"tasks: {', '.join(tasks)} " in header[0]


def test_explain_a_section_and_an_unknown_name():
    text = explain("train")
    assert "[train]" in text and "[data]" not in text and "[model]" not in text
    with pytest.raises(TextnnError, match=r"nothing to explain for 'trian'; did you mean 'train'"):
        explain("trian")


@pytest.mark.parametrize("task, key", [("classification", "bptt"), ("language_modeling", "text_pair_column"),
                                       ("tagging", "kfold"), ("classification", "tag_scheme")])
def test_a_data_option_of_another_task_is_an_unknown_key(task, key):
    raw = {"task": task, "data": {"train": "t", key: "1"}, "model": {"name": "rnn", "preset": "tiny"}}
    if task == "language_modeling":
        raw["model"] = {"name": "rnn_lm", "preset": "tiny"}
    with pytest.raises(TextnnError, match=f"unknown key data.{key}; .*textnn explain {task}"):
        config_from_dict(raw, "x.yaml")


def test_a_head_option_is_checked_by_the_tasks_head():
    raw = {"task": "tagging", "data": {"train": "t"}, "model": {"name": "rnn_tagger"}, "head": {"pooling": "max"}}
    with pytest.raises(TextnnError, match="unknown key head.pooling"):
        config_from_dict(raw, "x.yaml")
