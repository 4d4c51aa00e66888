"""README.md's commands on a pseudo-terminal, as typed at a prompt: tests/e2e/test_readme.py says how they
are run and what each must show; there they run into a log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_readme import prepare, run_readme


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory.mktemp("readme_terminal"))


def test_every_readme_command_on_a_terminal(base):
    run_readme(base, "terminal", on_terminal=True)
