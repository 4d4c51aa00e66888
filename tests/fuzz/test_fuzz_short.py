"""The short version of tests/fuzz/fuzz_inputs.py: a few hundred malformed inputs per reader, none of which
may end in anything but a clear TextnnError or a normal return (no traceback, hang or memory blow-up)."""

from __future__ import annotations

import os

import pytest

from tests.fuzz.fuzz_inputs import SEEDS, format_rows, fuzz


@pytest.mark.parametrize("reader", list(SEEDS))
def test_malformed_inputs_give_a_clear_error_or_are_read(reader):
    rows = fuzz(150, seed=1, only=[reader], time_bound=20.0)
    assert rows[0]["inputs"] == 150 and rows[0]["error"] > 0  # the inputs do reach the error paths
    assert rows[0]["other"] == 0, format_rows(rows)


CONFIG_TARGETS = ["config.name", "config.task", "config.data", "config.model", "config.head", "config.train"]


def test_the_config_seed_is_a_valid_config(tmp_path):
    """The config inputs spoil one section of a valid config, so the loader's deeper checks are reached."""
    from tests.fuzz.fuzz_inputs import seed_input
    from textnn.resolve import load_config

    (tmp_path / "seed.yaml").write_bytes(seed_input("config.train"))
    assert load_config(tmp_path / "seed.yaml").model_name == "cnn"


@pytest.mark.parametrize("target", CONFIG_TARGETS)
def test_malformed_configs_give_a_clear_error_or_load(target):
    rows = fuzz(40, seed=1, only=[target], time_bound=20.0)
    assert rows[0]["inputs"] == 40 and rows[0]["error"] > 0
    assert rows[0]["other"] == 0, format_rows(rows)


# The command inputs and the QA reader (fuzz_commands.py): on their quick path, in this process, at a fixed
# seed. TEXTNN_FUZZ_INPUTS=10000 runs the full count of docs/RELIABILITY.md (about 25 s of CPU).
COMMAND_INPUTS = {"qa": 2000, "qa.predict": 10_000, "predict": 2500, "translate": 2500, "generate": 2500,
                  "predict.csv": 1000, "predict.jsonl": 1000}


@pytest.mark.parametrize("target", list(COMMAND_INPUTS))
def test_command_inputs_give_a_clear_error_or_are_read(target):
    n = int(os.environ.get("TEXTNN_FUZZ_INPUTS", 0)) or COMMAND_INPUTS[target]
    rows = fuzz(n, seed=1, only=[target], time_bound=20.0)
    assert rows[0]["inputs"] == n and rows[0]["error"] > 0 and rows[0]["accepted"] > 0
    assert rows[0]["other"] == 0, format_rows(rows)


# The output places (fuzz_outputs.py): files, directories, FIFOs, devices made by mknod and links to each, in
# a private folder. TEXTNN_FUZZ_INPUTS=10000 runs the full count of docs/RELIABILITY.md.
@pytest.mark.parametrize("target", ["outputs.file", "outputs.directory"])
def test_output_places_are_written_by_the_rule_or_refused(target):
    n = int(os.environ.get("TEXTNN_FUZZ_INPUTS", 0)) or 400
    rows = fuzz(n, seed=1, only=[target], time_bound=20.0)
    assert rows[0]["inputs"] == n and rows[0]["error"] > 0 and rows[0]["accepted"] > 0
    assert rows[0]["other"] == 0, format_rows(rows)
