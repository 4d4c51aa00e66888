"""recipes/gpu/pretrain.sh as a user runs it: its smoke mode (every stage of the GPU path, probes and sizing
included, on the CPU with the first lines of the real data and 2-3 steps a run), then the manifest it wrote
checked file by file and run by run, and `manifest.py --verify` on it before and after a weights file is
changed by one bit. Then the refusals that come before anything is trained, and sizing.py on made-up records."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, SHARED_DATA, shared_data

SCRIPT = REPO / "recipes" / "gpu" / "pretrain.sh"
RUNS = {"wikitext2_ulmfit_lm": "perplexity", "wikitext2_bert_mini_pretrain": "mlm_accuracy",
        "sst2_ulmfit_lm": "perplexity", "sst2_bert_mini_tapt": "mlm_accuracy"}
PROBES = ("probe_lm_a", "probe_bert_a", "probe_lm_b", "probe_bert_b")


def pretrain(*args: str, data: Path = SHARED_DATA, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable, "DATA": str(data)})


def verify(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "recipes" / "gpu" / "manifest.py"), "--verify", str(out)],
                          capture_output=True, text=True, timeout=120)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def inside(row: str, other: str) -> bool:
    return f" {' '.join(row.lower().split())} " in f" {' '.join(other.lower().split())} "


def test_smoke_mode_runs_every_stage_and_its_manifest_lists_and_verifies_every_file(tmp_path):
    for name in ("wikitext2/train.txt", "wikitext2/valid.txt", "sst2/train.tsv"):
        shared_data(*name.split("/"))
    out = tmp_path / "out"
    done = pretrain("--smoke", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["mode"] == "smoke"

    # every file under OUT is listed, with its real size and sha256
    on_disk = {path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for name, entry in manifest["files"].items():
        assert entry == {"size": (out / name).stat().st_size, "sha256": file_sha256(out / name)}, name
    assert not (out / "probes").exists()  # probe runs are removed once their speed is read

    # every stage, with its command, exit status and time; each run's command names its run directory
    stages = {stage["name"]: stage for stage in manifest["stages"]}
    assert set(stages) == {"sst2_text", *PROBES, *RUNS}
    assert all(stage["exit_status"] == 0 and stage["seconds"] >= 0 for stage in stages.values())
    assert manifest["seconds_total"] >= max(stage["seconds"] for stage in stages.values())
    for run in RUNS:
        command = stages[run]["command"]
        assert command[:4] == [sys.executable, "-m", "textnn", "train"]
        assert Path(command[command.index("--run-dir") + 1]) == out / run
    smoke_sst2 = str(out / "smoke_data" / "sst2" / "train.tsv")
    assert stages["sst2_text"]["command"][1:3] == ["recipes/tsv_to_text.py", smoke_sst2]

    # each run as its own files say: finished, its dev metrics, the steps its probe sized it to
    sized = {entry["stage"]: entry["steps"] for entry in manifest["sizing"]}
    assert set(sized) == {"lm_a", "bert_a", "lm_b", "bert_b"}
    for (run, metric), kind in zip(RUNS.items(), ("lm_a", "bert_a", "lm_b", "bert_b")):
        summary, status = manifest["runs"][run], json.loads((out / run / "run.json").read_text(encoding="utf-8"))
        assert summary["status"] == "finished" and summary["dev"] == status["dev"] and metric in summary["dev"]
        assert summary["dev_evaluations"] and summary["dev_evaluations"][-1]["step"] == summary["steps"]
        assert summary["steps"] == sized[kind] and f"train.max_steps={sized[kind]}" in stages[run]["command"]
        assert set(summary["files"]) == {name for name in on_disk if name.startswith(run + "/")}
    assert {manifest["runs"][run]["precision"] for run in ("wikitext2_ulmfit_lm", "sst2_ulmfit_lm")} == {"fp32"}
    # the (b) runs start from the (a) runs, and read the SST-2 text with its held-out share apart
    assert f"model.init_from={out / 'wikitext2_ulmfit_lm'}" in stages["sst2_ulmfit_lm"]["command"]
    assert f"model.init_from={out / 'wikitext2_bert_mini_pretrain'}" in stages["sst2_bert_mini_tapt"]["command"]
    train = (out / "sst2_text" / "train.txt").read_text(encoding="utf-8").splitlines()
    dev = (out / "sst2_text" / "dev.txt").read_text(encoding="utf-8").splitlines()
    assert dev and not [row for row in dev if any(inside(row, other) for other in train)]

    assert manifest["machine"]["torch"] == torch.__version__ and manifest["machine"]["gpu"] is None
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert manifest["code"]["commit"] == (head.stdout.strip() if head.returncode == 0 else None)

    checked = verify(out)
    assert checked.returncode == 0 and "every file matches" in checked.stdout, checked.stdout + checked.stderr
    weights = out / "sst2_bert_mini_tapt" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    checked = verify(out)
    assert checked.returncode == 1 and "changed: sst2_bert_mini_tapt/model.safetensors" in checked.stdout
    assert "1 differences" in checked.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a CUDA device")
def test_without_a_gpu_it_stops_before_anything_and_names_the_cpu_path(tmp_path):
    data = tmp_path / "data"  # the data files need only exist: nothing reads them before the device check
    for name in ("wikitext2/train.txt", "wikitext2/valid.txt", "sst2/train.tsv"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("x\n", encoding="utf-8")
    done = pretrain(str(tmp_path / "out"), data=data, timeout=120)
    assert done.returncode == 2 and "no CUDA device" in done.stderr and "--cpu OUT" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_arguments_are_refused_with_the_usage(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x\n", encoding="utf-8")
    for args, words in (([], "usage:"), (["--gpu", str(tmp_path / "o")], "unknown option"),
                        (["--cpu", str(tmp_path / "full")], "is not empty"),
                        (["--cpu", str(tmp_path / "o")], "no data file")):
        done = pretrain(*args, data=tmp_path / "no-data", timeout=120)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
    assert not (tmp_path / "o").exists() and (tmp_path / "full" / "keep.txt").exists()


def test_sizing_reads_the_speed_of_training_alone_and_counts_the_evaluations(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    # 10 steps a second of training at first, then 40: the last third (training seconds >= 8 of 12) is what
    # counts; two evaluations, of 2 and 4 seconds, inside `seconds` and counted in `eval_seconds`
    records = []
    for trained in range(1, 13):
        evaluating = 0.0 if trained < 4 else 2.0 if trained < 10 else 6.0
        step = 10 * trained if trained <= 6 else 60 + 40 * (trained - 6)
        records.append({"split": "train", "step": step, "seconds": trained + evaluating, "eval_seconds": evaluating})
    records.insert(3, {"split": "dev", "step": 30, "loss": 1.0})
    (probe / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    record = tmp_path / "sizing.jsonl"

    def size(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "recipes" / "gpu" / "sizing.py"), str(probe), *args,
                               "--stage", "lm_a", "--record", str(record)], capture_output=True, text=True, timeout=60)

    done = size("30", "--evaluations", "4")  # 4 evaluations of 3 s on average leave 18 s: 720 steps at 40 a second
    assert done.returncode == 0 and done.stdout.strip() == "720", done.stderr
    assert json.loads(record.read_text(encoding="utf-8")) == {
        "stage": "lm_a", "probe": "probe", "steps_per_second": 40.0, "seconds_per_evaluation": 3.0,
        "evaluations": 4, "budget_seconds": 30.0, "training_seconds": 18.0, "steps": 720}
    assert size("30").stdout.strip() == "1200"
    assert size("30", "--at-most", "3").stdout.strip() == "3"
    done = size("30", "--evaluations", "10")
    assert done.returncode != 0 and "10 dev evaluations of 3.0 s each take more than" in done.stderr
    (probe / "metrics.jsonl").write_text(json.dumps(records[0]) + "\n", encoding="utf-8")
    done = size("30")
    assert done.returncode != 0 and "1 training records" in done.stderr
