"""The input-size policy: how much one input may ask of this machine, in one place.

Every limit here guards against an input that is endless or huge by mistake (`/dev/zero` given as data,
a whole book on one line, a beam of a million) and that would otherwise hang, fill the memory or end in
an allocation error deep inside torch. Each check refuses with one line that names the input, the size
found, the limit, and what to do. `textnn explain limits` prints the table below.

Lowest layer: nothing here imports torch or any other part of textnn but its errors.
"""

from __future__ import annotations

from textnn.errors import TextnnError

GiB = 1024 ** 3

# name -> (value, what it bounds); read by the checks below, by the commands' option checks and by explain.
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_STREAM_BYTES = 64 * GiB
MAX_BEAM = 1000
MAX_NEW_TOKENS = 100_000
MAX_SAMPLES = 1000
MAX_BATCH = 65_536
MAX_EXAMPLE_TOKENS = 20_000
MAX_PAIR_TOKENS = 1024
MAX_BOOTSTRAP = 100_000

TABLE = {
    "line": (MAX_LINE_BYTES, "bytes in one line of an input read line by line (predict, translate, generate RUN FILE)"),
    "stream": (MAX_STREAM_BYTES, "bytes read from a data file that is not a regular file (a pipe, a device)"),
    "beam": (MAX_BEAM, "--beam and --n-best of translate, generate and evaluate"),
    "new_tokens": (MAX_NEW_TOKENS, "tokens one `generate` or `translate` may write per input (--max-tokens; a "
                                   "model with a fixed context, GPT, goes past it by re-reading its last window)"),
    "samples": (MAX_SAMPLES, "--num-samples of generate: samples drawn side by side in one batch"),
    "batch": (MAX_BATCH, "--batch-size of evaluate, predict, translate, generate and visualize: examples in "
                         "one forward pass"),
    "example_tokens": (MAX_EXAMPLE_TOKENS, "tokens of one sentence a tagger reads whole (training, evaluate, "
                                           "predict): a longer one is refused"),
    "pair_tokens": (MAX_PAIR_TOKENS, "tokens of a side of a translation pair when neither data.max_length nor the "
                                     "model sets a limit: longer training pairs are skipped and counted, longer "
                                     "sources cut (as fairseq's default positions)"),
    "bootstrap": (MAX_BOOTSTRAP, "resamples behind a bootstrap interval (--bootstrap of evaluate, "
                                 "train.bootstrap_samples): each is the metric computed once more over the data"),
    "memory": (None, "a model whose training needs more memory than the machine has free is refused before "
                     "it is built (weights, gradients and the optimizer's two moments)"),
}


def describe() -> list[str]:
    """The limits as `textnn explain limits` prints them."""
    lines = ["[limits] inputs larger than these are refused with one line (textnn/limits.py)"]
    for name, (value, what) in TABLE.items():
        shown = "free memory" if value is None else f"{value:,}"
        lines.append(f"  {name:<16} {shown:>16}  {what}")
    return lines


def check_line(length: int, where: str) -> None:
    """Refuse a line of more than MAX_LINE_BYTES bytes (`where`: file:line)."""
    if length > MAX_LINE_BYTES:
        raise TextnnError(f"{where}: a line of more than {MAX_LINE_BYTES // (1024 * 1024)} MiB with no line break; "
                          f"is this a text file with one input per line? (an endless source such as /dev/zero, "
                          f"or binary data, looks like this)")


def check_stream(read: int, where: str) -> None:
    """Refuse a data source that is not a regular file once more than MAX_STREAM_BYTES came from it."""
    if read > MAX_STREAM_BYTES:
        raise TextnnError(f"{where}: more than {MAX_STREAM_BYTES // GiB} GiB read from a source that is not a "
                          f"regular file, and no end yet; give a file (an endless source such as /dev/zero or "
                          f"`yes` never ends)")


def check_count(value: int, name: str, option: str) -> None:
    """Refuse an option (`option`, e.g. "--beam") above the limit `name` of TABLE."""
    limit = TABLE[name][0]
    if value > limit:
        raise TextnnError(f"{option}={value:,}: more than the limit of {limit:,} ({TABLE[name][1]}); choose a "
                          f"smaller value")


def check_example(tokens: int, where: str, what: str, limit: int = MAX_EXAMPLE_TOKENS) -> None:
    """Refuse one sentence (or pair side) of more than `limit` tokens, which a model reads whole."""
    if tokens > limit:
        raise TextnnError(f"{where}: {what} of {tokens:,} tokens, more than the limit of {limit:,} for one "
                          f"sentence read whole; split it into sentences (one per line)")


def memory_available() -> int | None:
    """Bytes of memory free for a new allocation (Linux' MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# Float32 copies that training keeps of each parameter: the weights, their gradients, Adam's two moments.
TRAINING_COPIES = 4


def check_training_memory(parameters: int, bytes_per_value: int = 4, available: int | None = None) -> None:
    """Refuse a model whose `parameters` need more memory to train than is free, before any is allocated."""
    available = memory_available() if available is None else available
    needed = parameters * bytes_per_value * TRAINING_COPIES
    if available is not None and needed > available:
        raise TextnnError(f"the model has {parameters:,} parameters: training it needs at least "
                          f"{needed / GiB:,.1f} GiB (weights, gradients and two optimizer moments, "
                          f"{bytes_per_value} bytes each), but {available / GiB:,.1f} GiB of memory is free; "
                          f"choose smaller model sizes (`textnn explain model`)")
