"""The input-size policy (textnn/limits.py) as a user meets it: an endless or huge input, or a model too
large for the machine, is refused with one line and exit 2 before anything is written; never a hang, a
traceback or a memory that fills until the kernel kills the process (docs/RELIABILITY.md, items 13, 17)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_sentiment_tsv
from textnn import limits

REPO = Path(__file__).resolve().parents[2]
ZERO = Path("/dev/zero")
CONFIGS = {
    "classification": "task: classification\ndata: {format: tsv, train: TRAIN, dev: train.tsv}\n"
                      "model: {name: dan, preset: tiny}\n",
    "language_modeling": "task: language_modeling\ndata: {format: text, tokenizer: whitespace, bptt: 8, train: TRAIN, "
                         "dev: train.tsv}\nmodel: {name: rnn_lm, preset: tiny}\n",
}
TRAIN = "train: {max_steps: 2, batch_size: 8, threads: 1, progress: false, bootstrap_samples: 0}\n"


def textnn(*args: str, cwd: Path, input: bytes | None = None,
           address_space: int | None = None) -> subprocess.CompletedProcess:
    """`textnn ARGS`; `address_space`: run it under `ulimit -v` of that many bytes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    limit = None if address_space is None else lambda: resource.setrlimit(resource.RLIMIT_AS, (address_space,) * 2)
    return subprocess.run([sys.executable, "-m", "textnn", *args], cwd=cwd, input=input, capture_output=True,
                          timeout=300, env=env, preexec_fn=limit)


def refused(done: subprocess.CompletedProcess, *expected: str) -> str:
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and "Traceback" not in stderr, (done.returncode, stderr[-2000:])
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), stderr[-2000:]
    for text in expected:
        assert text in last, (text, last)
    return last


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("limits")
    write_sentiment_tsv(folder / "train.tsv", 40, seed=1)
    (folder / "config.yaml").write_text(CONFIGS["classification"].replace("TRAIN", "train.tsv") + TRAIN,
                                        encoding="utf-8")
    done = textnn("train", "config.yaml", "--run-dir", "run", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.skipif(not ZERO.exists(), reason="no /dev/zero on this system")
@pytest.mark.parametrize("task", sorted(CONFIGS))
def test_dev_zero_as_training_data_is_refused_at_once(folder, tmp_path, task):
    (tmp_path / "train.tsv").write_bytes((folder / "train.tsv").read_bytes())
    (tmp_path / "zero.yaml").write_text(CONFIGS[task].replace("TRAIN", str(ZERO)) + TRAIN, encoding="utf-8")
    refused(textnn("train", "zero.yaml", "--run-dir", "zero", cwd=tmp_path), str(ZERO), "NUL")
    assert not (tmp_path / "zero").exists()


@pytest.mark.skipif(not ZERO.exists(), reason="no /dev/zero on this system")
@pytest.mark.parametrize("command", [["evaluate", "run", "--data", str(ZERO)], ["predict", "run", str(ZERO)]])
def test_dev_zero_as_an_input_file_is_refused(folder, command):
    refused(textnn(*command, cwd=folder), str(ZERO))


def test_an_endless_line_on_standard_input_stops_at_the_line_limit(folder):
    endless = b"good " * (limits.MAX_LINE_BYTES // 5 + 2)  # no line break in 64 MiB and more
    refused(textnn("predict", "run", cwd=folder, input=endless), "<stdin>:1", "64 MiB")


def test_a_pipe_is_read_as_an_input_file(folder):
    """A source that is not a regular file but ends (a pipe: `predict RUN <(command)`) is read as a file."""
    read, write = os.pipe()
    os.write(write, b"good\nbad\n")
    os.close(write)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "textnn", "predict", "run", f"/dev/fd/{read}"], cwd=folder,
                          capture_output=True, text=True, timeout=300, env=env, pass_fds=(read,))
    os.close(read)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2


def test_a_model_larger_than_the_free_memory_is_refused_with_the_estimate(folder, tmp_path):
    done = textnn("train", str(folder / "config.yaml"), "--run-dir", str(tmp_path / "big"),
                  "model.embedding_dim=100000000", cwd=folder)
    refused(done, "parameters", "GiB", "free")
    assert not (tmp_path / "big").exists()


def test_the_memory_check_counts_weights_gradients_and_two_moments():
    limits.check_training_memory(1000, available=limits.Memory(16_000, "free memory"))  # 1000 x 4 bytes x 4 copies
    with pytest.raises(limits.TextnnError, match="1,001 parameters"):
        limits.check_training_memory(1001, available=limits.Memory(16_000, "free memory"))


ULIMIT = 2 * limits.GiB  # `ulimit -v` for the runs below: torch loads in it, with about 1.3 GiB to spare


def test_a_model_larger_than_ulimit_allows_is_refused_before_it_is_built(folder, tmp_path):
    """The free memory would allow the model (6 GiB to train), `ulimit -v` does not: refused up front in one
    line naming the limit, not an allocation traceback once building or training has begun."""
    done = textnn("train", str(folder / "config.yaml"), "--run-dir", str(tmp_path / "big"), "model.hidden_dim=20000",
                  cwd=folder, address_space=ULIMIT)
    refused(done, "400,240,210 parameters", "6.0 GiB", "(ulimit -v)")
    assert not (tmp_path / "big").exists()


def test_a_line_costing_more_than_the_memory_left_is_refused_before_it_is_tokenized(folder, tmp_path):
    """An 8 MiB line would take 2.5 GiB once tokenized (`line_cost`), more than the whole `ulimit -v`: one line
    names its file, line, size and the memory this process may use."""
    (tmp_path / "long.txt").write_text("good\n" + "a good film " * (8 * 2 ** 20 // 12) + "\n", encoding="utf-8")
    done = textnn("predict", "run", str(tmp_path / "long.txt"), cwd=folder, address_space=ULIMIT)
    refused(done, f"{tmp_path / 'long.txt'}:2", "8.0 MiB", "2.5 GiB once tokenized", "(ulimit -v)")


def test_a_long_line_is_measured_against_the_memory_given():
    limits.check_line(2 ** 20 - 1, "f.txt:1", available=limits.Memory(0, "ulimit -v"))  # short: never checked
    limits.check_line(2 * 2 ** 20, "f.txt:6", available=limits.Memory(limits.LINE_COST * 2 * 2 ** 20, "free memory"))
    with pytest.raises(limits.TextnnError, match=r"^f.txt:7: a line of 2.0 MiB .* may use 0.5 GiB \(ulimit -d\);"):
        limits.check_line(2 * 2 ** 20, "f.txt:7", available=limits.Memory(limits.GiB // 2, "ulimit -d"))


def fake_system(root: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """(proc, cgroup) folders under `root` holding `files` ({"proc/meminfo": text, ...})."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="ascii")
    return root / "proc", root / "cgroup"


NO_RLIMIT = {resource.RLIMIT_AS: (resource.RLIM_INFINITY,) * 2, resource.RLIMIT_DATA: (resource.RLIM_INFINITY,) * 2}
MEMINFO = {"proc/meminfo": "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n", "proc/self/statm": "1000 0 0 0 0 500 0\n"}


def test_the_memory_available_is_the_least_of_free_memory_cgroup_limits_and_ulimits(tmp_path):
    free = limits.Memory(8 * limits.GiB, "free memory")
    proc, cgroup = fake_system(tmp_path / "bare", MEMINFO)
    assert limits.memory_available(proc, cgroup, NO_RLIMIT.get) == free
    # cgroup v2: the limit of a cgroup above the process's binds; the page cache (inactive_file) does not count
    proc, cgroup = fake_system(tmp_path / "v2", {**MEMINFO, "proc/self/cgroup": "0::/app/job\n",
                                                 "cgroup/app/memory.max": f"{3 * limits.GiB}\n",
                                                 "cgroup/app/memory.current": f"{limits.GiB}\n",
                                                 "cgroup/app/memory.stat": f"anon 5\ninactive_file {limits.GiB // 2}\n",
                                                 "cgroup/app/job/memory.max": "max\n",
                                                 "cgroup/app/job/memory.current": "5\n"})
    assert limits.memory_available(proc, cgroup, NO_RLIMIT.get) == (2.5 * limits.GiB, "the cgroup's memory limit")
    # cgroup v1, seen from a container whose own cgroup is mounted as the root
    proc, cgroup = fake_system(tmp_path / "v1", {**MEMINFO, "proc/self/cgroup": "4:memory:/docker/abc\n1:cpu:/\n",
                                                 "cgroup/memory/memory.limit_in_bytes": f"{2 * limits.GiB}\n",
                                                 "cgroup/memory/memory.usage_in_bytes": f"{limits.GiB}\n"})
    assert limits.memory_available(proc, cgroup, NO_RLIMIT.get) == (limits.GiB, "the cgroup's memory limit")
    # `ulimit -v` and `ulimit -d`: the limit less what the process already holds (statm's size, data)
    page = resource.getpagesize()
    ulimits = {resource.RLIMIT_AS: (limits.GiB + 1000 * page, -1), resource.RLIMIT_DATA: (2 * limits.GiB, -1)}
    proc, cgroup = fake_system(tmp_path / "bare", MEMINFO)
    assert limits.memory_available(proc, cgroup, ulimits.get) == (limits.GiB, "ulimit -v")
    ulimits[resource.RLIMIT_DATA] = (limits.GiB // 4 + 500 * page, -1)
    assert limits.memory_available(proc, cgroup, ulimits.get) == (limits.GiB // 4, "ulimit -d")
    assert limits.memory_available(tmp_path / "none", tmp_path / "none", NO_RLIMIT.get) is None


def test_explain_lists_the_limits(folder):
    done = textnn("explain", "limits", cwd=folder)
    assert done.returncode == 0, done.stderr
    shown = done.stdout.decode()
    for name, (value, _) in limits.TABLE.items():
        assert name in shown and (value is None or f"{value:,}" in shown), (name, shown)


TAGGER = ("task: tagging\ndata: {format: conll, tag_scheme: iob1, train: TRAIN, dev: ner.txt}\n"
          "model: {name: rnn_tagger, preset: tiny}\n" + TRAIN)
TRANSLATOR = ("task: translation\ndata: {format: parallel, source: de, target: en, bpe_vocab_size: 200, train: mt, "
              "dev: mt}\nmodel: {name: seq2seq, preset: tiny}\n" + TRAIN)


def test_a_tagging_sentence_beyond_the_limit_is_refused_in_training_and_in_predict(tmp_path):
    """A sentence read whole (the CRF's table, the char encoder) of more than MAX_EXAMPLE_TOKENS tokens: one
    line naming the file and the sentence's first line, in training and in `predict` on raw text."""
    from tests.e2e.test_tagging_cli import write_toy_ner

    write_toy_ner(tmp_path / "ner.txt", 30, seed=1)
    long = "\n".join(["-DOCSTART- -X- O O", ""] + ["word NN I-NP O"] * (limits.MAX_EXAMPLE_TOKENS + 1)) + "\n"
    (tmp_path / "long.txt").write_text(long + "\n" + (tmp_path / "ner.txt").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (tmp_path / "long.yaml").write_text(TAGGER.replace("TRAIN", "long.txt"), encoding="utf-8")
    refused(textnn("train", "long.yaml", "--run-dir", "long", cwd=tmp_path), "long.txt:3", "20,001 tokens")
    assert not (tmp_path / "long").exists()
    (tmp_path / "ok.yaml").write_text(TAGGER.replace("TRAIN", "ner.txt"), encoding="utf-8")
    done = textnn("train", "ok.yaml", "--run-dir", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = " ".join(["word"] * (limits.MAX_EXAMPLE_TOKENS + 1)) + "\n"
    refused(textnn("predict", "run", cwd=tmp_path, input=("Angela met Emmanuel .\n" + line).encode()),
            "<stdin>:2", "20,001 tokens")


def test_a_translation_pair_beyond_the_default_limit_is_skipped_and_counted(tmp_path):
    """Without data.max_length, a recurrent translator (no length limit of its own) skips training pairs of
    more than MAX_PAIR_TOKENS tokens on a side, and says how many, instead of allocating for them."""
    from tests.e2e.test_translation_cli import write_corpus

    prefix = write_corpus(tmp_path, "mt", 40, seed=1)
    for side, word in (("de", "hund"), ("en", "dog")):
        path = Path(f"{prefix}.{side}")
        path.write_text(path.read_text(encoding="utf-8") + " ".join([word] * 5000) + "\n", encoding="utf-8")
    (tmp_path / "mt.yaml").write_text(TRANSLATOR, encoding="utf-8")
    done = textnn("train", "mt.yaml", "--run-dir", "run", cwd=tmp_path)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr[-2000:]
    assert "skipped 1 of 41 training pairs" in stderr and f"more than {limits.MAX_PAIR_TOKENS} tokens" in stderr


@pytest.mark.parametrize("command", [["predict", "run"], ["evaluate", "run", "--data", "train.tsv"]])
def test_inference_commands_take_a_device(folder, command):
    """--device on every command that runs a trained model: cpu runs; a GPU that is not there, or a name that
    is no device, is one line before the run is read."""
    ran = textnn(*command, "--device", "cpu", cwd=folder, input=b"good\n")
    assert ran.returncode == 0, ran.stderr
    refused(textnn(*command, "--device", "gpu0", cwd=folder, input=b"good\n"), "--device", "'gpu0' is not a device")
    import torch

    if not torch.cuda.is_available():
        refused(textnn(*command, "--device", "cuda", cwd=folder, input=b"good\n"), "--device", "CUDA is not available")
