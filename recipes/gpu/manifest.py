"""OUT/manifest.json of recipes/gpu/pretrain.sh: what was made, how, on what, and the check of a copy of it.

Writing (the script's last step): every file under OUT with its sha256 and size; for each run directory
(a folder with a run.json) its status, steps, time, precision, device and dev metrics, read from the
run's own run.json and metrics.jsonl; each stage's exact command, exit status and seconds of wall
clock and of CPU (from OUT/stages.tsv, which the script appends to) and the seconds of the whole script;
the speeds that sized the runs (OUT/sizing.jsonl); the machine (GPU or CPU, torch, CUDA, Python); the
code (git commit, and a sha256 over textnn/ and recipes/, which names the code where there is no git
checkout); the data files read, with their sha256.

Checking (`--verify OUT`, for anyone who copied or downloaded OUT): every file is hashed again and each
one that is missing, has another size or sha256, or is not in the manifest is named; exit status 1 if
any is, 0 if all match. It needs only Python's standard library.
    usage: python recipes/gpu/manifest.py OUT --mode gpu|cpu|smoke --seconds TOTAL --data DATA_DIR
           python recipes/gpu/manifest.py --verify OUT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "manifest.json"
DATA_FILES = ("wikitext2/train.txt", "wikitext2/valid.txt", "sst2/train.tsv")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def listed_files(out: Path) -> dict[str, dict]:
    """Every file under `out` but the manifest itself: its path relative to `out` (with /), size and sha256."""
    files = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path != out / NAME:
            files[path.relative_to(out).as_posix()] = {"size": path.stat().st_size, "sha256": sha256(path)}
    return files


def run_summary(run: Path, out: Path) -> dict:
    """What a run directory says of itself: run.json's outcome and the dev evaluations of metrics.jsonl."""
    status = json.loads((run / "run.json").read_text(encoding="utf-8"))
    evaluations = []
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("split") == status.get("selected_on", "dev"):
                evaluations.append({key: value for key, value in record.items() if key != "split"})
    legs = status.get("precision_legs") or []
    return {"path": run.relative_to(out).as_posix(), "status": status.get("status"), "steps": status.get("steps"),
            "total_steps": status.get("total_steps"), "stopped": status.get("stopped"),
            "train_seconds": status.get("train_seconds"), "tokens_per_second": status.get("tokens_per_second"),
            "precision": status.get("precision"), "device": legs[-1].get("device") if legs else None,
            "metric": status.get("metric"), "best": status.get("best"), "best_step": status.get("best_step"),
            "dev": status.get("dev"), "dev_evaluations": evaluations,
            "files": sorted(path.relative_to(out).as_posix() for path in run.rglob("*") if path.is_file())}


def stages(out: Path) -> list[dict]:
    """OUT/stages.tsv: one line a stage, NAME, SECONDS, CPU SECONDS (user and system, the command's processes
    together), EXIT STATUS and COMMAND (shell-quoted), tab-separated. CPU seconds below the seconds of the wall
    clock mean the command waited for a CPU (other processes ran) or for the GPU."""
    table = out / "stages.tsv"
    found = []
    for line in table.read_text(encoding="utf-8").splitlines() if table.is_file() else []:
        name, seconds, cpu_seconds, status, command = line.split("\t", 4)
        found.append({"name": name, "seconds": round(float(seconds), 1), "cpu_seconds": round(float(cpu_seconds), 1),
                      "exit_status": int(status), "command": shlex.split(command)})
    return found


def git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code() -> dict:
    """The commit of the code (None outside a git checkout), whether textnn/ or recipes/ differ from it
    (changed or new files), and a sha256 over every file of both (paths and bytes) that names the code
    either way."""
    digest = hashlib.sha256()
    files = sorted(path for folder in ("textnn", "recipes") for path in (REPO / folder).rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts)
    for path in files:
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + sha256(path).encode() + b"\n")
    commit = git("rev-parse", "HEAD")
    changes = git("status", "--porcelain", "--", "textnn", "recipes") if commit else None
    return {"commit": commit, "textnn_or_recipes_differ_from_commit": bool(changes) if commit else None,
            "source_sha256": digest.hexdigest(), "source_files": len(files)}


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (Linux), else what the platform module says."""
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text(encoding="utf-8").splitlines() if cpuinfo.is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict:
    import torch  # only here: --verify needs nothing but the standard library

    cuda = torch.cuda.is_available()
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None, "cuda": torch.version.cuda if cuda else None,
            "cpu": cpu_name(), "cpu_cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}


def write(out: Path, mode: str, seconds: float, data: Path) -> Path:
    sizing = out / "sizing.jsonl"
    runs = sorted(path.parent for path in out.rglob("run.json"))
    manifest = {
        "made_by": "recipes/gpu/pretrain.sh", "mode": mode,
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds_total": round(seconds, 1), "stages": stages(out),
        "sizing": [json.loads(line) for line in sizing.read_text(encoding="utf-8").splitlines()]
                  if sizing.is_file() else [],
        "runs": {run.name: run_summary(run, out) for run in runs},
        "machine": machine(), "code": code(),
        "data": {name: {"size": (data / name).stat().st_size, "sha256": sha256(data / name)}
                 for name in DATA_FILES if (data / name).is_file()},
        "files": listed_files(out),
    }
    path = out / NAME
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return path


def verify(out: Path) -> tuple[int, list[str]]:
    """How many files the manifest lists, and one line for each file that does not match it (none when all do)."""
    listed = json.loads((out / NAME).read_text(encoding="utf-8"))["files"]
    found = listed_files(out)
    problems = [f"missing: {name}" for name in listed if name not in found]
    for name, entry in found.items():
        if name not in listed:
            problems.append(f"not in the manifest: {name}")
        elif entry != listed[name]:
            problems.append(f"changed: {name} (size {entry['size']}, sha256 {entry['sha256']}; the manifest has "
                            f"size {listed[name]['size']}, sha256 {listed[name]['sha256']})")
    return len(listed), problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder recipes/gpu/pretrain.sh wrote")
    parser.add_argument("--verify", action="store_true", help="hash every file again and compare with the manifest")
    parser.add_argument("--mode", choices=("gpu", "cpu", "smoke"), help="the script's mode (writing)")
    parser.add_argument("--seconds", type=float, help="seconds the whole script took (writing)")
    parser.add_argument("--data", type=Path, help="the data folder the runs read (writing)")
    args = parser.parse_args()
    if args.verify:
        if not (args.out / NAME).is_file():
            raise SystemExit(f"{args.out / NAME}: no such file; give the folder recipes/gpu/pretrain.sh wrote")
        count, problems = verify(args.out)
        for problem in problems:
            print(problem)
        print(f"{args.out / NAME}: {count} files listed; "
              + (f"{len(problems)} differences" if problems else "every file matches"))
        sys.exit(1 if problems else 0)
    if args.mode is None or args.seconds is None or args.data is None:
        parser.error("writing a manifest needs --mode, --seconds and --data (or give --verify to check one)")
    print(f"wrote {write(args.out, args.mode, args.seconds, args.data)}")


if __name__ == "__main__":
    main()
