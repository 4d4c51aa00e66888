"""Command-line front end: parse arguments, call `textnn.experiment` / `textnn.demo`, print results.

Errors a user can cause surface as one line on stderr and exit code 2; Ctrl-C (SIGTERM) during
training saves a checkpoint and exits with 130 (143), as a process stopped by that signal does.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
from pathlib import Path

from textnn import defaults, limits, progress
from textnn.config import PRECISIONS
from textnn.errors import TextnnError, clip
from textnn.files import atomic_write_text, check_output_place, json_text


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line like every other error (its usage is one `--help` away)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}; see {self.prog} --help\n")


def _integer(minimum: int, maximum: int | None = None, why: str = ""):
    """argparse type of an integer option in [minimum, maximum]: a count, a size, a seed, where a negative
    value means nothing and would otherwise be read as something else (`-k -3`: all but three words).
    `why`: where the maximum comes from, said when it is passed."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            at_most = f" and <= {maximum:,}" if maximum is not None else ""
            because = f" ({why})" if why and maximum is not None and value > maximum else ""
            raise argparse.ArgumentTypeError(f"got {value:,}, expected an integer >= {minimum}{at_most}{because}")
        return value
    return parse


COUNT, OFF_OR_COUNT, SEED = _integer(1), _integer(0), _integer(0, 2 ** 32 - 1)
# Counts bounded by the input-size policy (textnn/limits.py): what one command may ask of the machine.
_LIMIT = "the input-size limit: see `textnn explain limits`"
BEAM, NEW_TOKENS, SAMPLES = (_integer(1, limits.MAX_BEAM, _LIMIT), _integer(1, limits.MAX_NEW_TOKENS, _LIMIT),
                             _integer(1, limits.MAX_SAMPLES, _LIMIT))
BATCH = _integer(1, limits.MAX_BATCH, _LIMIT)
RESAMPLES = _integer(0, limits.MAX_BOOTSTRAP, _LIMIT)
# --batch-size: what one forward pass holds, command by command, and the default of each
_EVAL_RULE = "the run's own, max(64, train.batch_size)"
BATCH_HELP = {
    "evaluate": f"examples per forward pass: sentences (classification, tagging), pairs (translation; scored "
                f"and decoded) or windows (GPT-style language models) (default: {_EVAL_RULE}; translation "
                f"decodes 128 sentences side by side, 32 with --beam; language models that carry their state "
                f"read one row, see --streams)",
    "predict": f"input lines (sentences, texts or pairs) per forward pass (default: {_EVAL_RULE})",
    "translate": "sentences decoded side by side (default 128, 32 with --beam)",
    "generate": "samples drawn side by side (default: all of --num-samples at once; with sampling, the samples "
                "depend on the batch size: each batch draws from its own seed)",
    "visualize": "accepted as by every command that runs a model; a view reads its one text as one sequence, "
                 "so the value changes nothing",
}


def _renamed(new: str):
    """argparse action of an old spelling of an option, accepted for one release: it stores where the new
    spelling does and says so in one line on stderr."""
    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"note: {option_string} is deprecated and will be removed in the next release; use {new}",
                  file=sys.stderr)
            setattr(namespace, self.dest, values)
    return Renamed


def _decoding_options(command: argparse.ArgumentParser, sampling: bool, n_best: bool) -> None:
    """The decoding flags, spelt the same in every command that decodes (generate, translate, evaluate);
    `_decoding` turns them into one DecodingConfig. A command without some of them has them as not given."""
    command.add_argument("--beam", type=BEAM, default=None, metavar="K",
                         help="beam search keeping K live hypotheses (default: " +
                              ("sampling)" if sampling else "greedy)"))
    command.add_argument("--length-penalty", type=float, default=None, metavar="A",
                         help="beam search: alpha of the GNMT length penalty ((5 + length) / 6) ** alpha "
                              "(default 0.6; 0 = rank by log-probability)")
    if n_best:
        command.add_argument("--n-best", type=BEAM, default=None, metavar="N",
                             help="beam search: the N best hypotheses of each input, best first, as one JSON line "
                                  "{input, \"hypotheses\", \"scores\"} (default 1: the best alone, as plain output)")
    else:
        command.set_defaults(n_best=None)
    if sampling:
        command.add_argument("--greedy", action="store_true", help="always take the most likely token (no sampling)")
        command.add_argument("--temperature", type=float, default=None,
                             help="sampling: < 1 sharper, > 1 flatter than the model's distribution (default 1)")
        command.add_argument("--top-k", type=OFF_OR_COUNT, default=None,
                             help="sampling: draw only from the k most likely tokens (default 0 = off)")
        command.add_argument("--top-p", type=float, default=None,
                             help="sampling: draw only from the nucleus of mass p (default 1 = off)")
    else:
        command.set_defaults(greedy=False, temperature=None, top_k=None, top_p=None, seed=None, max_tokens=None,
                             stop_at_eos=None)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="textnn", description="Neural networks for text: train, evaluate, "
                                     "predict, compare and look inside, from one config file.")
    parser.add_argument("--version", action="version", version=f"textnn {_version()}")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bars or stage lines (errors and results still print)")
    parser.set_defaults(threads=None)  # --threads: the commands that run a trained model add it
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model from a YAML config into a run directory")
    p.add_argument("config", nargs="?", help="YAML config file (see recipes/); not needed with --resume, which "
                                             "continues the run as it was configured")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=3e-4 model.preset=tiny")
    _set_option(p)
    p.add_argument("--run-dir", help="where to write the run (default runs/<config name>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir from its checkpoint, with its own settings (config.yaml); "
                        "overrides may change only its budget and how it runs (train.max_steps, epochs, "
                        "max_minutes, device, threads, progress, tensorboard, keep_checkpoint, precision)")
    p.add_argument("--extend", action="store_true",
                   help="with --resume and a larger budget: continue a run that stopped off its evaluation schedule "
                        "(max_steps or max_minutes between two evaluations), keeping the extra dev evaluation it "
                        "made there")

    p = sub.add_parser("evaluate", help="metrics of a trained run on a labelled file")
    p.add_argument("run", help="run directory written by `textnn train`")
    # Unset when absent (SUPPRESS), so that the older spelling --data, still accepted, is not overwritten
    p.add_argument("data", nargs="?", default=argparse.SUPPRESS, help="labelled file in the run's data format "
                   "(gzip too)")
    p.add_argument("--data", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--bootstrap", type=RESAMPLES, default=defaults.BOOTSTRAP_SAMPLES,
                   help=f"bootstrap resamples for the 95%% CI (default {defaults.BOOTSTRAP_SAMPLES}; 0 = off)")
    p.add_argument("--streams", type=COUNT, default=0,
                   help="language models: read N contiguous parts of the file side by side, each from a zero "
                        "state (faster, a different number); default: one sequential stream (GPT: overlapping windows)")
    p.add_argument("--top-n", type=COUNT, default=0,
                   help="word-embeddings runs, analogy files: only the N most frequent words are candidates "
                        "(default: the run's data.analogy_top_n, 30000)")
    _decoding_options(p, sampling=False, n_best=False)  # translation: the search behind BLEU/chrF
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")

    p = sub.add_parser("predict", help="label text: one input per line (text, text<TAB>pair, a JSON object, or "
                       "the rows of a table in the run's training format), JSONL out; tagging runs: raw text, "
                       "CoNLL or JSON lines in, JSONL or CoNLL out")
    p.add_argument("run", help="run directory written by `textnn train`")
    p.add_argument("input", nargs="?", default="-", help="input file, or - for standard input (default)")
    p.add_argument("--input-format", choices=("auto", "text", "conll", "jsonl"),
                   help="tagging runs: text (one sentence per line), conll (token columns, blank line between "
                        "sentences), jsonl (one object per line with \"tokens\" (a list) or \"text\") or auto "
                        "(default): jsonl when the first line is such an object, conll when it is -DOCSTART- or "
                        "every line has the same number (at least 2) of columns and a blank line separates sentences")
    p.add_argument("--output-format", choices=("jsonl", "conll"),
                   help="tagging runs: jsonl (default; tokens, tags, spans per sentence) or conll "
                        "(token, gold if the input has it, predicted tag)")
    p.add_argument("--output", "-o", help="write the predictions here instead of standard output")

    for name in ("evaluate", "predict"):
        _inference_options(sub.choices[name], name)

    p = sub.add_parser("export", help="write a bert or gpt run as a Hugging Face checkpoint directory "
                       "(config.json, model.safetensors, vocabulary) that transformers loads")
    p.add_argument("run", help="run directory written by `textnn train`")
    p.add_argument("output", help="directory to write (created if missing)")

    p = sub.add_parser("neighbors", help="the nearest words (cosine) of words, from a word-embeddings run")
    p.add_argument("run", help="run directory of task embeddings")
    p.add_argument("words", nargs="+", help="words to look up")
    p.add_argument("-k", type=COUNT, default=10, help="neighbours per word (default 10)")

    p = sub.add_parser("analogy", help="a is to b as c is to ?, from a word-embeddings run (3CosAdd)")
    p.add_argument("run", help="run directory of task embeddings")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("c")
    p.add_argument("-k", type=COUNT, default=10, help="answers to show (default 10)")

    p = sub.add_parser("translate", help="translate text with a trained translation run: one sentence per line")
    p.add_argument("run", help="run directory of a translation model")
    p.add_argument("input", nargs="?", default="-", help="input file, or - for standard input (default)")
    _decoding_options(p, sampling=False, n_best=True)
    p.add_argument("--nbest", dest="n_best", type=BEAM, action=_renamed("--n-best"), help=argparse.SUPPRESS)
    p.add_argument("--output", "-o", help="write the translations here instead of standard output")
    _inference_options(p, "translate")

    p = sub.add_parser("compare", help="train several configs on the same data and tabulate them, or tabulate the "
                       "best trials of a sweep (--sweep)")
    p.add_argument("configs", nargs="*", help="YAML config files, then dotted overrides applied to every config "
                   "(e.g. train.epochs=2)")
    p.add_argument("--sweep", metavar="DIR", help="instead of configs: the best complete trials of the sweep in DIR "
                   "(ranked by their validation value), with their dev numbers, evaluated once")
    p.add_argument("--top", type=COUNT, default=5, help="with --sweep: how many trials (default 5)")
    _set_option(p)
    p.add_argument("--output-dir", dest="runs_dir", default="runs/compare",
                   help="folder the runs are written into, one run directory per config (default runs/compare)")
    p.add_argument("--runs-dir", dest="runs_dir", help=argparse.SUPPRESS)  # the older spelling, still accepted
    p.add_argument("--markdown", help="also write the table as markdown to this file")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the runs side by side in this PNG: dev metric "
                   "against step and final values with their bootstrap intervals")

    p = sub.add_parser("sweep", help="search settings of a recipe (Optuna): each trial a run directory, selected "
                       "on a validation set; run it again to go on after a stop")
    p.add_argument("sweep_file", help="YAML sweep file (see recipes/sweeps/): recipe, overrides, space, sampler, "
                                      "trials, metric, seeds, prune")
    p.add_argument("--sweep-dir", help="folder for the trials' runs, sweep.json and the study "
                                       "(default runs/sweeps/<sweep name>)")
    p.add_argument("--storage", metavar="URL", help="the Optuna study's database (default: study.db in the sweep "
                   "folder); processes or machines given one URL (e.g. postgresql://user@host/db) run one sweep "
                   "together, each trial once")
    p.add_argument("--trials", type=COUNT, default=None,
                   help="the budget: trials that complete or are pruned (default: the sweep file's trials; a grid: "
                        "its size)")

    p = sub.add_parser("runs", help="one line per run below a folder: task, model, status, best metric, steps, size")
    p.add_argument("folder", nargs="?", default="runs", help="where to look, recursively (default runs/)")
    p.add_argument("--json", action="store_true", help="one JSON object per run (size in bytes)")

    p = sub.add_parser("explain", help="list every config option with its default and doc")
    p.add_argument("section", nargs="?", default="",
                   help="task, data, head, train, model, limits, a task name (its data and head options) or a model name")

    p = sub.add_parser("demo", help="train a character LSTM on Python's own source, sample it, show its cells")
    p.add_argument("--minutes", type=float, default=3.0, help="training time budget (default 3)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--run-dir", default="runs/demo", help="where to write the run (default runs/demo)")
    p.add_argument("--seed", type=SEED, default=0)

    p = sub.add_parser("generate", help="continue a prompt with a trained language model")
    p.add_argument("run", help="run directory of a language model")
    p.add_argument("input", nargs="?", default=None,
                   help="input file (- for standard input): continue every line, one prompt per line, read and "
                        "answered part by part: one JSON line per prompt ({\"prompt\", \"text\"}); with "
                        "sampling, line i uses seed SEED + i - 1")
    p.add_argument("--file", dest="input", action=_renamed("the input file as the argument after RUN"),
                   help=argparse.SUPPRESS)
    p.add_argument("--prompt", default=None, help="text to continue (default: empty = start of a new line)")
    p.add_argument("--max-tokens", type=NEW_TOKENS, default=defaults.GENERATE["max_tokens"],
                   help=f"new tokens per sample (default {defaults.GENERATE['max_tokens']})")
    _decoding_options(p, sampling=True, n_best=True)
    p.add_argument("--seed", type=SEED, default=None, help="seed of the draws (default: random, printed)")
    p.add_argument("--num-samples", type=SAMPLES, default=1, help="independent samples of the prompt (default 1)")
    p.add_argument("--stop-at-eos", action="store_true", default=defaults.GENERATE["stop_at_eos"],
                   help="end each sample at the end of its line (<eos>, or a newline for character models)")
    p.add_argument("--output", "-o", help="write the text here instead of standard output")
    _inference_options(p, "generate")

    p = sub.add_parser("visualize", help="look inside a model: attention maps (GPT), LSTM cells, or a "
                       "translation's source x target attention")
    p.add_argument("run", help="run directory of a language model or a translation model")
    p.add_argument("input", nargs="?", default=None, help="a UTF-8 file (gzip too) holding the text the model reads")
    p.add_argument("--file", dest="input", action=_renamed("the input file as the argument after RUN"),
                   help=argparse.SUPPRESS)
    p.add_argument("--text", help="the text the model reads (translation: the source sentence), instead of a file")
    p.add_argument("--output-dir", help="folder for the PNG/HTML files (default RUN/views)")
    p.add_argument("--output", dest="output_dir", action=_renamed("--output-dir"), help=argparse.SUPPRESS)
    _inference_options(p, "visualize")

    p = sub.add_parser("serve", help="serve runs over HTTP (JSON API, OpenAI-compatible completions, metrics); "
                       "needs the extra textnn[serve]")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories, each served by its directory's name")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_integer(0, 65535), default=8000, help="port (default 8000; 0: a free one, said "
                                                                          "at start)")
    p.add_argument("--max-batch", type=BATCH, default=32, metavar="N",
                   help="inputs of concurrent requests computed in one forward pass (default 32; 1: each request "
                        "alone)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                   help="how long a request waits for others to share its forward pass (default 5)")
    p.add_argument("--queue", type=COUNT, default=256, metavar="N",
                   help="requests a run holds waiting; past that, 429 with Retry-After (default 256)")
    p.add_argument("--grace", type=float, default=10.0, metavar="S",
                   help="on SIGTERM: seconds to answer the requests in flight before exiting (default 10)")
    p.add_argument("--threads", type=COUNT, default=None, help="CPU threads for torch (default: torch's own)")
    p.add_argument("--device", default=defaults.DEVICE, help="where the models run: auto (default), cpu, cuda or "
                                                             "cuda:N")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="what the models compute in: fp32, bf16 or auto; default: the precision each run trained in")
    for command in sub.choices.values():  # also after the command, as every other option: `textnn train -q C.yaml`
        command.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                             help="no progress bars or stage lines (errors and results still print)")
    return parser


def _set_option(command: argparse.ArgumentParser) -> None:
    """--set KEY=VALUE, the other spelling of a bare dotted override (train and compare take both)."""
    command.add_argument("--set", dest="set_overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="a dotted override (repeatable), the same as a bare KEY=VALUE, e.g. --set train.epochs=2")


def _inference_options(command: argparse.ArgumentParser, name: str) -> None:
    """--threads, --device and --batch-size for a command that runs a trained model (torch's default is every
    core, which on a busy machine is slower than one); `name` picks the command's --batch-size help."""
    command.add_argument("--threads", type=COUNT, default=None,
                         help="CPU threads for torch (default: torch's own, every core)")
    command.add_argument("--device", default=defaults.DEVICE,
                         help="where the model runs: auto (default: cuda when a GPU is available, else cpu), cpu, "
                              "cuda or cuda:N")
    command.add_argument("--batch-size", type=BATCH, default=None, metavar="N", help=BATCH_HELP[name])
    command.add_argument("--precision", choices=PRECISIONS, default=None,
                         help="what the model computes in: fp32, bf16 (autocast) or auto (this machine's choice); "
                              "default: the precision the run trained in, as run.json records it")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("textnn")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _train(args: argparse.Namespace) -> int:
    from textnn.experiment import resume_config, train
    from textnn.resolve import load_config
    from textnn.training import distributed

    config_path, overrides = args.config, args.overrides + args.set_overrides
    if config_path is not None and _is_override(config_path):  # train --resume --run-dir RUN train.max_steps=9
        config_path, overrides = None, [config_path, *overrides]
    if args.extend and not args.resume:
        raise TextnnError("--extend continues a run: pass --resume (and the larger train.max_steps, epochs or "
                          "max_minutes) too")
    notes: list[str] = []
    if args.resume:
        config, notes = resume_config(args.run_dir, config_path, overrides)
        run_dir = args.run_dir or Path("runs") / config.name
    elif config_path is None:
        raise TextnnError("train: give a YAML config (see recipes/), or --resume --run-dir RUN to continue a run")
    else:
        config, run_dir = load_config(config_path, overrides), args.run_dir
    run, result = train(config, run_dir, resume=args.resume, extend=args.extend, notes=notes)
    if not distributed.is_main():  # torchrun: process 0 reports for all
        return 0
    for split, metrics in (("dev", result.dev), ("test", result.test)):
        if metrics:
            print(f"{split}: " + "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    print(f"run: {run.path}  ({result.steps} steps, {result.train_seconds:.1f}s, stopped: {result.stopped})")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from textnn.experiment import metric_lines
    from textnn.front import evaluate_run

    if not hasattr(args, "data"):
        raise TextnnError("evaluate needs a labelled file: textnn evaluate RUN FILE")
    given = args.beam is not None or args.length_penalty is not None  # else the task's own (translation: greedy)
    metrics = evaluate_run(args.run, args.data, bootstrap_samples=args.bootstrap, device=args.device,
                           batch_size=args.batch_size, precision_asked=args.precision, streams=args.streams,
                           top_n=args.top_n, decoding=_decoding(args, "greedy") if given else None)
    print(json_text(metrics) if args.json else "\n".join(metric_lines(args.run, metrics)))
    return 0


def _predict(args: argparse.Namespace) -> int:
    from textnn.front import predict_run

    return _write_predictions(args, lambda run, lines, source: predict_run(
        run, lines, source, device=args.device, batch_size=args.batch_size, precision_asked=args.precision,
        input_format=args.input_format, output_format=args.output_format))


def _translate(args: argparse.Namespace) -> int:
    from textnn.front import translate_run

    decoding = _decoding(args, "greedy")
    return _write_predictions(args, lambda run, lines, source: translate_run(
        run, lines, source, decoding, device=args.device, batch_size=args.batch_size, precision_asked=args.precision))


def _write_predictions(args: argparse.Namespace, run) -> int:
    """Read args.input (a file or - for stdin), write the output lines of `run(run_dir, lines, source)`
    (predict_run or translate_run) to args.output or stdout."""
    if args.output:
        check_output_place(args.output, "file", "-o")  # before the run is read
    with _input_lines(args.input) as (lines, source):
        write_lines(progress.counted(run(args.run, lines, source), f"{args.command} {Path(args.run).name}", "line"),
                    args.output)
    return 0


@contextlib.contextmanager
def _input_lines(name: str):
    """(lazy UTF-8 lines, name for messages) of a file (gzip too), or of standard input for `-`."""
    from textnn.data.readers import iter_input_lines, open_input, open_standard_input

    if name == "-":
        yield iter_input_lines(open_standard_input(sys.stdin.buffer), "<stdin>"), "<stdin>"
        return
    path = str(Path(name).expanduser())
    with open_input(path) as handle:
        yield iter_input_lines(handle, path), path


def write_lines(lines, output: str | None) -> None:
    """Write each line as soon as it comes (a pipe reader sees the first answers at once).

    Into a file (`-o`): by `files.open_output`, a temporary file beside it renamed over it once every line
    is written, so an error halfway, a full disk, Ctrl-C or SIGTERM leaves no half-written output that looks
    complete; a device or a pipe (/dev/stdout, a FIFO) is written in place.
    """
    if not output:
        for line in lines:
            with progress.beside_bars():
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        return
    from textnn.files import open_output

    with open_output(Path(output).expanduser(), "output file") as handle:
        for line in lines:
            handle.write((line + "\n").encode("utf-8"))


def _export(args: argparse.Namespace) -> int:
    from textnn.experiment import export_run

    for path in export_run(args.run, args.output):
        print(f"wrote {path}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from textnn.experiment import compare, format_table

    if args.sweep and (args.configs or args.overrides or args.set_overrides):
        raise TextnnError("compare --sweep DIR tabulates the trials of a sweep: give it no configs or overrides")
    if not args.configs and not args.sweep:
        raise TextnnError("compare needs at least one YAML config file before its overrides (or --sweep DIR)")
    if not args.sweep:
        check_output_place(args.runs_dir, "directory", "--output-dir")  # all before any training
    if args.markdown:
        check_output_place(args.markdown, "file", "--markdown")
    if args.sweep:
        from textnn.sweep import compare_sweep

        rows = compare_sweep(args.sweep, args.top)
    else:
        rows = compare(args.configs, args.overrides + args.set_overrides, args.runs_dir, plot=args.plot)
    print(format_table(rows))
    if args.markdown:
        atomic_write_text(Path(args.markdown).expanduser(), format_table(rows, markdown=True) + "\n")
        print(f"markdown table: {args.markdown}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from textnn.sweep import run_sweep, summary_lines

    def trial_ended(line: str) -> None:
        with progress.beside_bars():
            print(line, flush=True)

    result = run_sweep(args.sweep_file, args.sweep_dir, args.storage, args.trials, on_trial=trial_ended)
    for line in summary_lines(result):
        print(line)
    return 0


def _runs(args: argparse.Namespace) -> int:
    from textnn.runs import summaries, table_lines

    rows = summaries(args.folder)
    if args.json:
        for row in rows:
            print(json_text(row))
        return 0
    for line in table_lines(rows):
        print(line)
    if not rows:
        print(f"no runs below {args.folder}", file=sys.stderr)
    return 0


def _neighbors(args: argparse.Namespace) -> int:
    from textnn.experiment import neighbors_run

    for word, found in neighbors_run(args.run, args.words, args.k).items():
        print(f"{word}: " + "  ".join(f"{other} {score:.3f}" for other, score in found))
    return 0


def _analogy(args: argparse.Namespace) -> int:
    from textnn.experiment import analogy_run

    found = analogy_run(args.run, args.a, args.b, args.c, args.k)
    print(f"{args.a} : {args.b} :: {args.c} : " + "  ".join(f"{word} {score:.3f}" for word, score in found))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from textnn.resolve import explain

    print(explain(args.section))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from textnn.demo import run_demo

    run_demo(minutes=args.minutes, temperature=args.temperature, run_dir=args.run_dir, seed=args.seed)
    return 0


def _decoding(args: argparse.Namespace, default_method: str):
    """The one DecodingConfig a command's decoding flags (`_decoding_options`) describe, checked once."""
    from textnn.generation.decoding import DecodingConfig

    return DecodingConfig.from_flags(default_method, greedy=args.greedy, beam=args.beam,
                                     length_penalty=args.length_penalty, n_best=args.n_best,
                                     temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                                     max_tokens=args.max_tokens, stop_at_eos=args.stop_at_eos)


def _generate(args: argparse.Namespace) -> int:
    """One prompt: one sample is written as its tokens come (flushed piece by piece, as a text generator
    is read); several samples and beam search's outputs once they are all done."""
    from textnn.experiment import generate_run

    decoding = _decoding(args, defaults.GENERATE["method"])
    if args.output:
        check_output_place(args.output, "file", "-o")  # before the run is read
    if args.input is not None:
        return _generate_file(args, decoding)
    # the seed drawn, said once: before the first text (which may take a while) or at the end
    decoding, seed_note = _seeded(decoding)
    streamed = args.num_samples == 1 and decoding.search.streams and not args.output

    def write(piece: str) -> None:
        while seed_note:
            print(seed_note.pop(), file=sys.stderr)
        sys.stdout.write(piece)
        sys.stdout.flush()

    result = generate_run(args.run, args.prompt or "", decoding, num_samples=args.num_samples,
                          on_text=write if streamed else None, device=args.device, batch_size=args.batch_size,
                          precision_asked=args.precision)
    while seed_note:
        print(seed_note.pop(), file=sys.stderr)
    if streamed:
        write("\n")
    if result.unknown_tokens:
        print(f"note: {result.unknown_tokens} of the prompt's {result.prompt_tokens} tokens are not in the "
              f"vocabulary and were read as <unk>", file=sys.stderr)
    if decoding.n_best > 1:  # the n-best format of every command: one JSON line per input
        write_lines([json_text({"prompt": result.prompt, "hypotheses": result.samples,
                                "scores": [round(score, 6) for score in result.scores]}, ensure_ascii=False)],
                    args.output)
        return 0
    count = len(result.samples)
    samples = [] if streamed else result.samples
    write_lines([line for number, text in enumerate(samples, start=1)
                 for line in ([f"=== sample {number} of {count} ==="] if count > 1 else []) + [text]], args.output)
    return 0


def _seeded(decoding):
    """(decoding with its seed fixed, the line that says a drawn seed, or none): a seeded search given no
    --seed draws one, which the user needs to repeat the samples."""
    seeded = decoding.with_seed()
    drawn = seeded.seed != decoding.seed
    return seeded, [f"seed {seeded.seed} (repeat these samples with --seed {seeded.seed})"] if drawn else []


def _generate_file(args: argparse.Namespace, decoding) -> int:
    """`generate RUN FILE`: every line a prompt, read lazily, one JSON line out per line, written as done."""
    from textnn.experiment import generate_file_run

    if args.prompt is not None:
        raise TextnnError("--prompt and an input file both give prompts: use --prompt for one, a file for one per line")
    decoding, seed_note = _seeded(decoding)
    for line in seed_note:
        print(line, file=sys.stderr)
    with _input_lines(args.input) as (lines, source):
        write_lines(generate_file_run(args.run, lines, source, decoding, num_samples=args.num_samples,
                                      device=args.device, batch_size=args.batch_size,
                                      precision_asked=args.precision), args.output)
    return 0


def _visualize(args: argparse.Namespace) -> int:
    from textnn.experiment import visualize_run

    from textnn.data.readers import read_text

    if (args.text is None) == (args.input is None):
        raise TextnnError("visualize reads one text: give an input file or --text (not both)")
    text = args.text if args.input is None else read_text(args.input)
    for written in visualize_run(args.run, text, args.output_dir, device=args.device, batch_size=args.batch_size,
                                 precision_asked=args.precision):
        print(f"wrote {written}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from textnn.server import serve

    serve(args.runs, host=args.host, port=args.port, grace=args.grace, max_batch=args.max_batch,
          max_wait_ms=args.max_wait_ms, queue_size=args.queue, device=args.device, threads=args.threads,
          precision=args.precision)
    return 0


COMMANDS = {"train": _train, "evaluate": _evaluate, "predict": _predict, "translate": _translate,
            "export": _export, "compare": _compare, "sweep": _sweep, "runs": _runs, "explain": _explain,
            "neighbors": _neighbors,
            "analogy": _analogy, "demo": _demo, "generate": _generate, "visualize": _visualize,
            "serve": _serve}


def _is_override(item: str) -> bool:
    """Whether a bare argument is a dotted override KEY=VALUE rather than a config file or an option."""
    return "=" in item and not item.startswith("-") and not Path(item).is_file()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as arguments; `train` and `compare` take dotted overrides both bare (KEY=VALUE,
    before or after the options) and as --set KEY=VALUE, gathered in `overrides` + `set_overrides`."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "compare":  # bare overrides among the configs: compare A.yaml B.yaml train.epochs=2
        args.overrides = [item for item in args.configs if _is_override(item)]
        args.configs = [item for item in args.configs if not _is_override(item)]
    if args.command in ("train", "compare"):  # overrides may also follow the options: train CFG --resume train.lr=1
        args.overrides += [item for item in extra if _is_override(item)]
        extra = [item for item in extra if not _is_override(item)]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


class StandardOutputError(TextnnError):
    """Standard output cannot be written (a full disk, a size limit): the one error of every command for it."""


class _StandardOutput:
    """sys.stdout as every command writes it: an OSError while writing or flushing (`> /dev/full`, a file
    past `ulimit -f`) becomes one StandardOutputError, whichever command and line wrote. A reader that
    stopped early (BrokenPipeError, `| head`) is left to `main`, which does not count it as an error.
    A closed standard output (`>&-`, where Python's sys.stdout is None) fails at the first write, the same way."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if self.stream is None:
            raise StandardOutputError("standard output: cannot write: it is closed (`>&-`); send the output to a "
                                      "file or to /dev/null")
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._error(err) from None

    def flush(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._error(err) from None

    def __getattr__(self, name: str):  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self.stream, name)

    @staticmethod
    def _error(err: OSError) -> StandardOutputError:
        from textnn.files import write_failure

        return StandardOutputError(f"standard output: cannot write: {write_failure(err)}; free space or send the "
                                   f"output to a writable place")


def _silence_stdout(stream) -> None:
    """Point the descriptor under `stream` at /dev/null, so that Python's own flush at exit finds nothing it
    cannot write (it would print a second complaint after the one line)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # AttributeError: a closed one (None)
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _hold_closed_stdout() -> None:
    """With descriptor 1 closed (`>&-`), the next file opened would get it, and whatever writes to standard
    output below Python (a library's C code, a child process) would land in that file: hold it with /dev/null."""
    try:
        os.fstat(1)
    except OSError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`), raised wherever the command is, as Ctrl-C is: every output being written by
    replace removes its temporary file on the way out (`files.temporary_beside`)."""


def _on_terminate(signum, frame) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    progress.set_quiet(args.quiet)
    if args.threads:  # the inference commands' --threads (train sets train.threads)
        import torch

        torch.set_num_threads(args.threads)
    stdout = sys.stdout
    if stdout is None:
        _hold_closed_stdout()
    sys.stdout = _StandardOutput(stdout)
    previous_sigterm = None
    if args.command != "train":  # train stops on SIGTERM at a checkpoint itself; under torchrun, at once
        with contextlib.suppress(ValueError):  # not the main thread: signals are not ours to handle
            previous_sigterm = signal.signal(signal.SIGTERM, _on_terminate)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # what is still buffered fails here, as the same one line
        return code
    except StandardOutputError as err:
        print(f"error: {err}", file=sys.stderr)
        _silence_stdout(stdout)
        return 2
    except TextnnError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        terminated = isinstance(err, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 128 + (signal.SIGTERM if terminated else signal.SIGINT)
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error
        # Python would complain once more when it flushes stdout at exit; point stdout at nothing instead.
        _silence_stdout(stdout)
        return 0
    except OSError as err:
        if err.errno != errno.ENAMETOOLONG:  # a path given anywhere (a config, a run, -o...): one line for all
            raise
        name = str(err.filename or "")
        part = max(Path(name).parts or [name], key=lambda part: len(os.fsencode(part)))
        print(f"error: {clip(name, 60)}: the name {clip(part, 20)} is {len(os.fsencode(part))} bytes long, more than "
              f"the file system allows for one name (255 bytes); choose a shorter name", file=sys.stderr)
        return 2
    except Exception as err:
        # Imported here, not above, so that `explain` and config errors do not pay for importing torch;
        # a TrainingInterrupted can only come from a command that has already imported the trainer.
        from textnn.training.trainer import TrainingInterrupted

        if isinstance(err, TrainingInterrupted):
            from textnn.training import distributed

            if distributed.is_main():  # torchrun: every process stops; process 0 says so
                print(str(err), file=sys.stderr)
            return 128 + err.signal_number
        raise
    finally:
        sys.stdout = stdout
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


if __name__ == "__main__":
    raise SystemExit(main())
