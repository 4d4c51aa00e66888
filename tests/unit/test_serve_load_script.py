"""benchmarks/serve_load.py in its quickest mode, on tiny runs trained here: the JSON holds every side at every
level with answered requests, positive throughput and p50 <= p99, the ratios at every level, and the memory
series; the table says the same. No timing is asserted: the figures only have to exist and be coherent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from tests.e2e.test_translation_cli import write_corpus

pytest.importorskip("fastapi", reason="textnn serve needs the extra textnn[serve] (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="textnn serve needs the extra textnn[serve] (fastapi, uvicorn)")
pytest.importorskip("transformers", reason="the baseline side loads the exported run with transformers")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "serve_load.py"
TRAIN = "train: {{max_steps: 4, batch_size: 8, progress: false, bootstrap_samples: 0, threads: 1, device: cpu}}\n"
CLASSIFIER = ("task: classification\ndata: {{format: tsv, train: {train}, dev: {dev}, max_length: 16, "
              "tokenizer: wordpiece, wordpiece_vocab_size: 80}}\nmodel: {{name: bert, preset: tiny}}\n" + TRAIN)
TRANSLATOR = ("task: translation\ndata: {{format: parallel, train: {train}, dev: {dev}, source: de, target: en, "
              "tokenizer: bpe, bpe_vocab_size: 200, joint_vocab: true}}\nmodel: {{name: transformer_mt, preset: tiny}}\n"
              + TRAIN)


def run(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "TEXTNN_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[dict, str]:
    root = tmp_path_factory.mktemp("serve_load")
    data = root / "data"
    (data / "sst2").mkdir(parents=True)
    (data / "multi30k").mkdir()
    write_sentiment_tsv(data / "sst2" / "train.tsv", 48, seed=1)
    write_sentiment_tsv(data / "sst2" / "dev.tsv", 16, seed=2)
    write_corpus(data / "multi30k", "train", 48, seed=1)
    write_corpus(data / "multi30k", "val", 12, seed=2)
    runs = {}
    for name, config, train, dev in (
            ("cls", CLASSIFIER, data / "sst2" / "train.tsv", data / "sst2" / "dev.tsv"),
            ("mt", TRANSLATOR, data / "multi30k" / "train", data / "multi30k" / "val")):
        (root / f"{name}.yaml").write_text(config.format(train=train, dev=dev), encoding="utf-8")
        done = run("-m", "textnn", "train", str(root / f"{name}.yaml"), "--run-dir", str(root / name), cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = root / name
    out = root / "load.json"
    done = run(str(SCRIPT), "--quick", "--classifier", str(runs["cls"]), "--translator", str(runs["mt"]),
               "--data", str(data), "--work", str(root / "work"), "--out", str(out), cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8")), done.stdout


def fp32_side(found: dict) -> set[str]:
    """The float32 side is added where the run computes in another precision (bf16: a CPU with native bf16)."""
    return {"batched_fp32"} if found["runs"]["classifier"]["sides"]["batched"]["precision"] != "fp32" else set()


def test_every_side_answers_at_every_level(measured):
    found, _ = measured
    levels = found["levels"]
    assert levels == [1, 4]
    expected = {"classifier": {"batched", "max_batch_1", "pipeline"} | fp32_side(found),
                "translator": {"batched", "max_batch_1"}}
    assert {name: set(run["sides"]) for name, run in found["runs"].items()} == expected
    for name, run in found["runs"].items():
        for side, measured_side in run["sides"].items():
            assert [level["clients"] for level in measured_side["levels"]] == levels, (name, side)
            for level in measured_side["levels"]:
                assert level["failed"] == 0 and level["requests"] == found["requests_per_level"], (name, side, level)
                assert level["requests_per_second"] > 0, (name, side, level)
                assert 0 < level["p50_ms"] <= level["p99_ms"], (name, side, level)
                if side != "pipeline":  # textnn's /metrics: a forward pass holds at least one input
                    assert level["mean_batch"] >= 1, (name, side, level)
            assert measured_side["precision"] in ("fp32", "bf16")
    assert found["runs"]["classifier"]["sides"]["pipeline"]["precision"] == "fp32"
    if fp32_side(found):
        assert found["runs"]["classifier"]["sides"]["batched_fp32"]["precision"] == "fp32"


def test_single_requests_are_never_batched(measured):
    found, _ = measured
    for run in found["runs"].values():
        assert all(level["mean_batch"] == 1 for level in run["sides"]["max_batch_1"]["levels"])


def test_ratios_at_every_level_and_the_table(measured):
    found, table = measured
    classifier, translator = found["runs"]["classifier"], found["runs"]["translator"]
    assert set(classifier["ratios"]) == {"batched / max_batch_1", "batched / pipeline"} | \
        {f"{side} / pipeline" for side in fp32_side(found)}
    assert set(translator["ratios"]) == {"batched / max_batch_1"}
    for run in (classifier, translator):
        sides = run["sides"]
        for name, ratio in run["ratios"].items():
            top, bottom = name.split(" / ")
            assert set(ratio) == {"1", "4"}
            for x, y, clients in zip(sides[top]["levels"], sides[bottom]["levels"], found["levels"]):
                assert ratio[str(clients)] == round(x["requests_per_second"] / y["requests_per_second"], 2)
        assert set(run["same_answers"]) == set(run["ratios"]) and run["compared_inputs"] > 0
        assert all(0 <= share <= 1 for share in run["same_answers"].values())
    assert "| classifier | batched / pipeline |" in table and "| translator | pipeline |" not in table


def test_memory_series(measured):
    found, table = measured
    memory = found["memory"]
    assert memory["requests"] == 60 and memory["failed"] == 0
    assert [point["requests"] for point in memory["series"]] == [0, 20, 40, 60]
    assert all(point["rss_mib"] > 0 for point in memory["series"])
    assert memory["growth_mib"] == round(memory["series"][-1]["rss_mib"] - memory["series"][1]["rss_mib"], 1)
    assert "growth from request 20 to 60" in table


def test_help_runs():
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--max-batch 1" in done.stdout
