"""Command-line front end: parse arguments, call `textnn.experiment` / `textnn.demo`, print results.

Errors a user can cause surface as one line on stderr and exit code 2; Ctrl-C during training saves
a checkpoint and exits with 130.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from textnn.errors import TextnnError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="textnn", description="Neural networks for text: train, evaluate, "
                                     "predict, compare and look inside, from one config file.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model from a YAML config into a run directory")
    p.add_argument("config", help="YAML config file (see recipes/)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=3e-4 model.preset=tiny")
    p.add_argument("--run-dir", help="where to write the run (default runs/<config name>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")

    p = sub.add_parser("evaluate", help="metrics of a trained run on a labelled file")
    p.add_argument("run", help="run directory written by `textnn train`")
    p.add_argument("--data", required=True, help="labelled file in the run's data format")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% CI (0 = off)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")

    p = sub.add_parser("predict", help="label text: one input per line (text, or text<TAB>pair), JSONL out")
    p.add_argument("run", help="run directory written by `textnn train`")
    p.add_argument("input", nargs="?", default="-", help="input file, or - for standard input (default)")
    p.add_argument("--output", "-o", help="write JSONL here instead of standard output")

    p = sub.add_parser("compare", help="train several configs on the same data and tabulate them")
    p.add_argument("configs", nargs="+", help="YAML config files")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override applied to every config (repeatable), e.g. --set train.epochs=2")
    p.add_argument("--runs-dir", default="runs/compare", help="parent directory of the runs (default runs/compare)")
    p.add_argument("--markdown", help="also write the table as markdown to this file")

    p = sub.add_parser("explain", help="list every config option with its default and doc")
    p.add_argument("section", nargs="?", default="", help="task, data, train, model, or a model name (e.g. cnn)")

    p = sub.add_parser("demo", help="train a character LSTM on Python's own source, sample it, show its cells")
    p.add_argument("--minutes", type=float, default=3.0, help="training time budget (default 3)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--run-dir", default="runs/demo", help="where to write the run (default runs/demo)")
    p.add_argument("--seed", type=int, default=0)
    return parser


def _train(args: argparse.Namespace) -> int:
    from textnn.config import load_config
    from textnn.experiment import train

    config = load_config(args.config, args.overrides)
    run, result = train(config, args.run_dir, resume=args.resume)
    for split, metrics in (("dev", result.dev), ("test", result.test)):
        if metrics:
            print(f"{split}: " + "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    print(f"run: {run.path}  ({result.steps} steps, {result.train_seconds:.1f}s, stopped: {result.stopped})")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from textnn.experiment import evaluate_run

    metrics = evaluate_run(args.run, args.data, bootstrap_samples=args.bootstrap)
    if args.json:
        print(json.dumps(metrics))
        return 0
    for key, value in metrics.items():
        if key == "confusion_matrix":
            print("confusion matrix (rows = gold, columns = predicted):")
            print("\n".join("  " + " ".join(f"{n:6d}" for n in row) for row in value))
        else:
            print(f"{key:>18}: {value:.4f}" if isinstance(value, float) else f"{key:>18}: {value}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from textnn.experiment import predict_run

    if args.input == "-":
        lines, source = list(sys.stdin), "<stdin>"
    else:
        path = Path(args.input)
        if not path.is_file():
            raise TextnnError(f"{path}: input file not found")
        try:
            lines, source = path.read_text(encoding="utf-8").splitlines(), str(path)
        except UnicodeDecodeError as err:
            raise TextnnError(f"{path}: not UTF-8 (byte {err.start}); re-encode the file as UTF-8") from None
    results = [json.dumps(row, ensure_ascii=False) for row in predict_run(args.run, lines, source)]
    text = "\n".join(results) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from textnn.experiment import compare, format_table

    rows = compare(args.configs, args.overrides, args.runs_dir)
    print(format_table(rows))
    if args.markdown:
        Path(args.markdown).write_text(format_table(rows, markdown=True) + "\n", encoding="utf-8")
        print(f"markdown table: {args.markdown}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from textnn.config import explain

    print(explain(args.section))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from textnn.demo import run_demo

    run_demo(minutes=args.minutes, temperature=args.temperature, run_dir=args.run_dir, seed=args.seed)
    return 0


COMMANDS = {"train": _train, "evaluate": _evaluate, "predict": _predict, "compare": _compare,
            "explain": _explain, "demo": _demo}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "train":  # overrides may also follow the options: train CFG --resume train.lr=1
        args.overrides += [item for item in extra if "=" in item and not item.startswith("-")]
        extra = [item for item in extra if item not in args.overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return COMMANDS[args.command](args)
    except TextnnError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:
        # Imported here, not above, so that `explain` and config errors do not pay for importing torch;
        # a TrainingInterrupted can only come from a command that has already imported the trainer.
        from textnn.training.trainer import TrainingInterrupted

        if isinstance(err, TrainingInterrupted):
            print(str(err), file=sys.stderr)
            return 130
        raise


if __name__ == "__main__":
    raise SystemExit(main())
