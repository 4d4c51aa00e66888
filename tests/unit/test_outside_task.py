"""A task of the user's own, named in a config as "package.module:Class": imported when asked for, checked to be
a Task, refused with a textnn error that names the value and what is expected, and, for a saved run, never
imported from inside the run's folder."""

from __future__ import annotations

import dataclasses
import sys
import uuid

import pytest

from textnn import registry
from textnn.resolve import config_from_dict
from textnn.errors import TextnnError
from textnn.tasks.base import BatchTask

EXAMPLE = "examples.nli.nli_task:NLITask"


def test_the_worked_example_is_a_whole_task():
    cls = registry.task_class(EXAMPLE)
    assert issubclass(cls, BatchTask) and not cls.__abstractmethods__
    assert dataclasses.is_dataclass(cls.Example) and dataclasses.is_dataclass(cls.Prediction)
    assert "rnn" in registry.models_for(EXAMPLE) and "bert" not in registry.models_for(EXAMPLE)


def test_a_config_names_it_and_keeps_its_name(tmp_path):
    raw = {"task": EXAMPLE, "model": {"name": "cbow"}, "data": {"train": "t.tsv", "premise_column": "p"}}
    config = config_from_dict(raw, "my.yaml")
    assert config.task == EXAMPLE and config.data.premise_column == "p"
    with pytest.raises(TextnnError, match=r"my.yaml: .*premise_colum\b"):  # its data: options are checked
        config_from_dict({**raw, "data": {"premise_colum": "p"}}, "my.yaml")


@pytest.mark.parametrize("value, message", [
    ("nli", r"unknown task 'nli'.*'package.module:Class'"),
    ("not a module:Task", r"'not a module:Task': expected a registered task .*'package.module:Class'"),
    ("no_such_package_here.tasks:MyTask", r"'no_such_package_here.tasks:MyTask': module no_such_package_here.tasks "
                                          r"cannot be imported here; .*PYTHONPATH"),
    ("os:no_such_name", r"'os:no_such_name': module os has no no_such_name; expected a subclass of "
                        r"textnn.tasks.base.Task"),
    ("os:path", r"'os:path': os.path is a module; expected a subclass of textnn.tasks.base.Task"),
    ("textnn.tasks.base:Table", r"textnn.tasks.base.Table is another class; expected a subclass"),
])
def test_what_is_not_a_task_is_refused_by_name(value, message):
    with pytest.raises(TextnnError, match=message):
        registry.task_class(value)


def test_a_config_says_where_the_bad_task_is():
    with pytest.raises(TextnnError, match=r"my.yaml: task: 'os:path': os.path is a module"):
        config_from_dict({"task": "os:path", "model": {"name": "cbow"}}, "my.yaml")


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A run directory holding a module that marks a file when imported, the directory on sys.path (as the
    current folder is under `python -m`): (run directory, module name, marker file)."""
    run = tmp_path / "run"
    run.mkdir()
    name = f"planted_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (run / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(run))
    yield run, name, marker
    sys.modules.pop(name, None)


def test_a_saved_run_never_imports_from_its_own_folder(planted):
    run, name, marker = planted
    with pytest.raises(TextnnError, match=rf"module {name} cannot be imported here \(never from inside the run "
                                          rf"directory .*run\)"):
        registry.task_class(f"{name}:Task", saved_in=run)
    assert not marker.exists()
    assert str(run) in sys.path  # the path is given back as it was


def test_the_same_module_given_to_train_is_imported(planted):
    """The refusal above is the saved run's rule, not a module that could not be found: a config being trained
    imports from the path as it is."""
    run, name, marker = planted
    with pytest.raises(TextnnError, match=rf"module {name} has no Task"):
        registry.task_class(f"{name}:Task")
    assert marker.exists()
