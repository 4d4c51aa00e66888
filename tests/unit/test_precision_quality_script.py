"""benchmarks/precision_quality.py: a run's row carries the precision its run.json says it trained in."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "precision_quality.py"


def load_script():
    spec = importlib.util.spec_from_file_location("precision_quality", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def write_run(run_dir: Path, legs: list[str], steps: int = 5) -> Path:
    run_dir.mkdir(parents=True)
    info = {"status": "finished", "steps": steps, "train_seconds": 1.5, "dev": {"accuracy": 0.75},
            "precision_legs": [{"from_step": i, "precision": p, "device": "cpu"} for i, p in enumerate(legs)]}
    (run_dir / "run.json").write_text(json.dumps(info), encoding="utf-8")
    return run_dir


def test_a_run_is_read_in_the_precision_of_its_last_leg(tmp_path):
    script = load_script()
    run = write_run(tmp_path / "run", ["fp32", "bf16"])
    assert script.read_run(run, 5, "bf16") == {"dev": {"accuracy": 0.75}, "train_seconds": 1.5, "steps": 5}
    with pytest.raises(SystemExit, match="in bf16, not 5 in fp32"):
        script.read_run(run, 5, "fp32")
    with pytest.raises(SystemExit, match="trained 5 steps"):
        script.read_run(run, 6, "bf16")
    assert script.read_run(tmp_path / "absent", 5, "bf16") is None


def test_help_runs():
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "precision_legs" in done.stdout
