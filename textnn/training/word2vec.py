"""The training loop of word2vec: plain SGD with sparse row-wise updates, many windows per step.

Why not `Trainer`: word2vec's speed comes from touching only the rows of the words in play, with
a learning rate decaying linearly over the words read (Mikolov et al. 2013a; word2vec.c). A dense
optimizer step over the [V, D] tables would cost the whole vocabulary per step. So this loop
computes the gradient of the sigmoid losses by hand and adds it into the rows with `index_add_`,
for `model.batch_words` centre words at once (no Python loop per word or per pair). It keeps every
promise of `Trainer` about the run directory: run.json status, metrics.jsonl, a resumable
checkpoint at each epoch end (and every train.checkpoint_every steps), a progress bar, and Ctrl-C
finishing the step, saving the checkpoint and exiting.

One step, skip-gram (each word predicted from every word of its window): all the window's words
share the word's noise words (or its Huffman path), so the scores of a window are one small
matrix product [C, D] x [D, T] instead of C separate dot products per target; Ji et al. 2016
("Parallelizing Word2Vec in Shared and Distributed Memory", section 3) show that sharing keeps the
accuracy. CBOW predicts the word from the mean of its window's vectors, as word2vec.c does, and
adds the whole gradient of that mean to every window word (word2vec.c and gensim's cbow_mean=1).
"""

# N centre words in a step, C window slots (2 * window), T targets (1 + negatives, or the code length), D size

from __future__ import annotations

import math
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from textnn.config import TrainConfig
from textnn.errors import TextnnError
from textnn.models.word2vec import seed_of
from textnn.runs import RunDir
from textnn.training import distributed
from textnn.training.checkpoint import load_checkpoint, save_checkpoint, save_weights
from textnn.training.trainer import STOP_SIGNALS, TrainingInterrupted, TrainResult, resolve_device, say


@torch.no_grad()
def sgd_step(inputs: torch.Tensor, outputs: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor,
             targets: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, lr: float,
             cbow: bool) -> torch.Tensor:
    """One SGD step of the word2vec sigmoid losses, in place on the rows of `inputs` and `outputs`.

    context [N, C] input rows (the window of each centre word), context_mask [N, C] bool;
    targets [N, T] output rows, labels [N, T] (1 for the word / the left branch, 0 for noise),
    weights [N, T] (0 drops a target: a noise word equal to the word, or past the end of a code).
    The loss of one prediction is -sum_t w_t log sigmoid(+-score_t), whose gradient with respect to a
    score is -(label - sigmoid(score)); each row moves by lr times minus its gradient (2013b eq. 4),
    shared out when several windows of the step update the same row (ROW_SHARE below).
    Returns the summed loss (a 0-d tensor, left on the device).
    """
    dim = inputs.shape[1]
    ctx = F.embedding(context, inputs)  # [N, C, D] (faster than inputs[context] on the CPU)
    out = F.embedding(targets, outputs)  # [N, T, D]
    mask = context_mask.to(ctx.dtype)
    if cbow:
        count = mask.sum(1, keepdim=True)  # [N, 1]
        weights = weights * (count > 0)  # a word alone in its sentence predicts nothing
    # the shares of rows updated by several windows (ROW_SHARE), folded into the small error terms
    # rather than into the [*, D] updates
    share_in = _share(context, mask, inputs.shape[0]).to(ctx.dtype)  # [N, C]
    share_out = _share(targets, weights, outputs.shape[0]).to(ctx.dtype)  # [N, T]
    if cbow:
        hidden = torch.bmm(mask.unsqueeze(1), ctx).squeeze(1) / count.clamp(min=1)  # [N, D]
        scores = torch.bmm(out, hidden.unsqueeze(2)).squeeze(2)  # [N, T]
        g = (labels - torch.sigmoid(scores)) * weights * lr  # [N, T]
        grad_hidden = torch.bmm(g.unsqueeze(1), out)  # [N, 1, D]
        grad_ctx = grad_hidden * (mask * share_in).unsqueeze(2)  # [N, C, D]
        grad_out = (g * share_out).unsqueeze(2) * hidden.unsqueeze(1)  # [N, T, D]
        loss = -(F.logsigmoid(torch.where(labels > 0, scores, -scores)) * weights).sum()
    else:
        scores = torch.bmm(ctx, out.transpose(1, 2))  # [N, C, T]
        both = mask.unsqueeze(2) * weights.unsqueeze(1)  # [N, C, T]
        g = (labels.unsqueeze(1) - torch.sigmoid(scores)) * both * lr  # [N, C, T]
        grad_ctx = torch.bmm(g * share_in.unsqueeze(2), out)  # [N, C, D]
        grad_out = torch.bmm((g * share_out.unsqueeze(1)).transpose(1, 2), ctx)  # [N, T, D]
        signed = torch.where(labels.unsqueeze(1) > 0, scores, -scores)
        loss = -(F.logsigmoid(signed) * both).sum()
    inputs.index_add_(0, context.reshape(-1), grad_ctx.reshape(-1, dim))  # [N*C, D]
    outputs.index_add_(0, targets.reshape(-1), grad_out.reshape(-1, dim))  # [N*T, D]
    return loss


# A row that n windows update in one step moves by n^(1 - ROW_SHARE) times their mean update. The
# plain sum (ROW_SHARE = 0, what n sequential SGD updates would give to first order) overshoots for
# the most frequent words: all n updates were computed from the same row, none saw the others, and
# a small vocabulary diverges; the mean (ROW_SHARE = 1) moves a frequent word once per step, too
# slowly. 1/4 kept skip-gram on WikiText-2 at gensim's analogy accuracy (benchmarks/word2vec_vs_gensim.py).
ROW_SHARE = 0.25


def _share(rows: torch.Tensor, used: torch.Tensor, size: int) -> torch.Tensor:
    """The factor n^-ROW_SHARE of each update to `rows` (any shape), n = the updates of that row in use
    (`used` > 0, same shape)."""
    flat = rows.reshape(-1)  # [R]
    counts = torch.bincount(flat, weights=(used.reshape(-1) > 0).float(), minlength=size)  # [size]
    return counts[flat].clamp(min=1).pow(-ROW_SHARE).view(rows.shape)


class Word2VecTrainer:
    """Trains the word2vec tables of `task` (tasks/embeddings.py) into `run`; `fit` as `Trainer.fit`."""

    def __init__(self, task, model, cfg: TrainConfig, run: RunDir):
        if distributed.world() > 1:
            raise TextnnError("task embeddings trains in one process: run it without torchrun and set "
                              "train.threads (CPU) or use a GPU")
        self.task, self.cfg, self.run = task, cfg, run
        self.device = resolve_device(cfg.device)
        self.model = model.to(self.device)
        self.mcfg = task.config.model
        # Only a holder for the checkpoint format (training/checkpoint.py); the updates are by hand.
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.mcfg.start_alpha)
        self._interrupted = 0  # the stop signal received (SIGINT or SIGTERM), 0 = none
        self.data = task.device_arrays(self.device)
        # train.threads on the CPU: that many threads each train their share of a step's words on
        # one core, updating the shared tables without locks (Hogwild, Recht et al. 2011), as
        # word2vec.c and gensim's workers do. torch's own intra-op threads would split every small
        # operation and wait at its end, which costs more than it saves here (and far more on a
        # busy machine). Several threads make a run's result vary slightly from run to run.
        workers = cfg.threads if self.device.type == "cpu" and cfg.threads > 1 else 1
        self._workers_range = range(workers)
        self._pool = None
        if workers > 1:
            torch.set_num_threads(1)
            self._pool = ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))
        self.total_steps = sum(task.num_train_batches(epoch) for epoch in range(cfg.epochs))
        if cfg.max_steps:
            self.total_steps = min(self.total_steps, cfg.max_steps)

    # ----------------------------------------------------------------------------------------------
    def _generator(self, *key: int) -> torch.Generator:
        """A generator for one (epoch, step, thread's part): a resumed run draws what the first would have."""
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed_of(self.cfg.seed, *key))
        return generator

    def _windows(self, stream: torch.Tensor, sentence: torch.Tensor, start: int, end: int,
                 generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The step's centre words, grouped by the window size b each drew: (centre [N_b], context
        [N_b, 2b], mask [N_b, 2b]) per b. Grouping spares the slots a full 2 * window would leave empty
        (on average (window - 1) / (2 * window) of them)."""
        window = self.mcfg.window
        positions = torch.arange(start, end, device=self.device)  # [N]
        # The window size is drawn per word in 1..window (2013a section 3.1): near words count more.
        reach = torch.randint(1, window + 1, (len(positions),), device=self.device, generator=generator)
        order = torch.argsort(reach, stable=True)
        sizes = torch.bincount(reach, minlength=window + 1).tolist()
        groups, first = [], 0
        for size in range(1, window + 1):
            if not sizes[size]:
                continue
            centre = positions[order[first:first + sizes[size]]]  # [N_b]
            first += sizes[size]
            offsets = torch.cat([torch.arange(-size, 0), torch.arange(1, size + 1)]).to(self.device)  # [2b]
            around = centre.unsqueeze(1) + offsets  # [N_b, 2b]
            inside = (around >= 0) & (around < len(stream))
            around = around.clamp(0, len(stream) - 1)
            mask = inside & (sentence[around] == sentence[centre].unsqueeze(1))  # no window crosses a line
            groups.append((stream[centre], stream[around], mask))
        return groups

    def _targets(self, centre: torch.Tensor, generator: torch.Generator):
        """targets [N, T], labels [N, T], weights [N, T] of the centre words (see `sgd_step`)."""
        data = self.data
        if self.mcfg.loss == "hierarchical":
            targets = data["points"][centre]
            labels = (1 - data["codes"][centre]).float()  # word2vec.c: the label of a branch is 1 - its code bit
            weights = data["path_mask"][centre].float()
            return targets, labels, weights
        table = data["noise_table"]
        draws = torch.randint(len(table), (len(centre), self.mcfg.negative), device=self.device, generator=generator)
        noise = table[draws]  # [N, K]
        targets = torch.cat([centre.unsqueeze(1), noise], 1)  # [N, 1 + K]
        labels = torch.zeros(targets.shape, device=self.device)
        labels[:, 0] = 1
        weights = torch.ones(targets.shape, device=self.device)
        weights[:, 1:] = (noise != centre.unsqueeze(1)).float()  # word2vec.c skips a draw of the word itself
        return targets, labels, weights

    def _parts(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """(part, start, end) of a step's words for each worker thread."""
        edges = np.linspace(start, end, len(self._workers_range) + 1).round().astype(int).tolist()
        return [(k, edges[k], edges[k + 1]) for k in self._workers_range if edges[k + 1] > edges[k]]

    def _train_part(self, stream: torch.Tensor, sentence: torch.Tensor, part: tuple[int, int, int],
                    key: tuple[int, int], lr: float) -> torch.Tensor:
        """Train the windows of words start..end of the epoch's stream; returns their summed loss."""
        number, start, end = part
        generator = self._generator(*key, number)
        loss = torch.zeros((), device=self.device)
        for centre, context, mask in self._windows(stream, sentence, start, end, generator):
            targets, labels, weights = self._targets(centre, generator)
            loss += sgd_step(self.model.input.data, self.model.output.data, context, mask, targets, labels,
                             weights, lr, cbow=self.mcfg.architecture == "cbow")
        return loss

    def _epoch_stream(self, epoch: int):
        """The words of an epoch after subsampling: ids, sentence numbers and raw positions (for the lr)."""
        return self.task.subsample(epoch, self.cfg.seed, self.data)

    # ----------------------------------------------------------------------------------------------
    def _on_signal(self, signum, frame) -> None:
        """Ctrl-C or SIGTERM: finish the step, checkpoint, stop (as the generic trainer); a second one stops at once."""
        if self._interrupted:
            raise KeyboardInterrupt
        self._interrupted = signum
        say(f"interrupt ({signal.Signals(signum).name}): finishing this step, then saving a checkpoint "
            f"(again to abort)")

    def _save_checkpoint(self, state: dict) -> None:
        save_checkpoint(self.run.checkpoint_file, self.model, self.optimizer, state)

    def fit(self, resume: bool = False) -> TrainResult:
        cfg, run, mcfg = self.cfg, self.run, self.mcfg
        # words: corpus words of the finished epochs; epoch_words: read so far in the current one
        state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "seconds": 0.0, "words": 0, "epoch_words": 0}
        if resume:
            state = load_checkpoint(run.checkpoint_file, self.model, self.optimizer)
            run.truncate_metrics(state["step"])
            say(f"resuming {run.path} at step {state['step']} (epoch {state['epoch'] + 1})")
        run.set_status("running", total_steps=self.total_steps, vocabulary=len(self.task.vocab),
                       corpus_words=self.task.corpus_words, dropped_words=self.task.dropped)
        corpus_words = self.task.corpus_words
        planned_words = corpus_words * cfg.epochs
        alpha, min_alpha = mcfg.start_alpha, mcfg.min_alpha
        previous_handlers = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        bar = tqdm(total=self.total_steps, initial=state["step"], disable=not cfg.progress,
                   desc=f"train {run.path.name}", unit="step", file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.2 if sys.stderr.isatty() else 10.0)
        started = time.perf_counter() - state["seconds"]
        stopped = None
        log_loss, log_predictions = torch.zeros((), device=self.device), 0
        try:
            while state["epoch"] < cfg.epochs and not stopped:
                stream, sentence, raw_position = self._epoch_stream(state["epoch"])
                starts = range(0, len(stream), mcfg.batch_words)
                ends = [min(start + mcfg.batch_words, len(stream)) for start in starts]
                # corpus words read by the end of each step (one transfer per epoch, not one per step)
                read = (raw_position[torch.tensor(ends, dtype=torch.long, device=self.device) - 1] + 1).tolist()
                for index in range(state["batch_in_epoch"], len(starts)):
                    start, end = starts[index], ends[index]
                    # Linear decay over the words read, as word2vec.c and gensim do (2013a section 4.2).
                    done = (state["epoch"] * corpus_words + read[index]) / planned_words
                    lr = max(min_alpha, alpha - (alpha - min_alpha) * done)
                    parts = self._parts(start, end)
                    key = (state["epoch"], index)
                    if self._pool is None:
                        log_loss += self._train_part(stream, sentence, parts[0], key, lr)
                    else:
                        for loss in self._pool.map(lambda part: self._train_part(stream, sentence, part, key, lr),
                                                   parts):
                            log_loss += loss
                    log_predictions += end - start
                    state["step"] += 1
                    state["batch_in_epoch"] = index + 1
                    state["epoch_words"] = read[index]
                    state["seconds"] = time.perf_counter() - started
                    bar.update(1)
                    if state["step"] % cfg.log_every == 0:
                        loss = float(log_loss) / max(log_predictions, 1)
                        if not math.isfinite(loss):
                            self._diverged(state, loss)
                        words = state["words"] + read[index]
                        speed = words / max(state["seconds"], 1e-9)
                        bar.set_postfix(loss=f"{loss:.4f}", words_s=f"{speed:,.0f}", lr=f"{lr:.5f}",
                                        epoch=state["epoch"] + 1, refresh=False)
                        run.append_metrics({"split": "train", "step": state["step"], "epoch": state["epoch"],
                                            "loss": loss, "lr": lr, "words_per_s": speed,
                                            "seconds": round(state["seconds"], 2)})
                        log_loss, log_predictions = torch.zeros((), device=self.device), 0
                    if cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0:
                        self._save_checkpoint(state)
                    stopped = self._stop_reason(state)
                    if self._interrupted:
                        self._stop_interrupted(state)
                    if stopped:
                        break
                else:
                    state["words"] += corpus_words
                    state["epoch_words"] = 0
                    state["epoch"] += 1
                    state["batch_in_epoch"] = 0
                    self._save_checkpoint(state)
                    if self._interrupted:
                        self._stop_interrupted(state)
        finally:
            bar.close()
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
            if self._pool is not None:
                self._pool.shutdown()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        state["seconds"] = time.perf_counter() - started
        stopped = stopped or "completed"
        if not (torch.isfinite(self.model.input).all() and torch.isfinite(self.model.output).all()):
            self._diverged(state, float("nan"))
        self._save_checkpoint(state)
        save_weights(self.model, run.weights_file)
        self.task.write_vectors(self.model, run.path)
        dev = self.task.evaluate_split(self.model, "dev")
        test = self.task.evaluate_split(self.model, "test")
        for split, metrics in (("dev_final", dev), ("test", test)):
            if metrics:
                run.append_metrics({"split": split, "step": state["step"], **_scalars(metrics)})
        seconds = max(state["seconds"], 1e-9)
        words = state["words"] + state["epoch_words"]
        metric = self.task.default_metric
        best = dev.get(metric) if dev else None
        result = TrainResult(steps=state["step"], epochs_completed=state["epoch"], train_seconds=seconds,
                             examples_per_second=words / seconds, tokens_per_second=words / seconds,
                             best_metric=best, best_step=state["step"] if dev else None, metric_name=metric,
                             higher_is_better=True, parameters=sum(p.numel() for p in self.model.parameters()),
                             dev=dev, test=test, stopped=stopped)
        return result  # the run is marked finished once its report is written (experiment.train)

    def _diverged(self, state: dict, loss: float) -> None:
        raise TextnnError(f"training diverged at step {state['step']} (loss {loss}): the vectors are no longer "
                          f"finite; start a new run with a lower model.alpha or model.batch_words")

    def _stop_reason(self, state: dict) -> str | None:
        if self.cfg.max_steps and state["step"] >= self.cfg.max_steps:
            return "max_steps"
        if self.cfg.max_minutes and state["seconds"] >= 60 * self.cfg.max_minutes:
            return "max_minutes"
        return None

    def _stop_interrupted(self, state: dict) -> None:
        self._save_checkpoint(state)
        self.run.set_status("interrupted", step=state["step"])
        raise TrainingInterrupted(f"interrupted at step {state['step']}; checkpoint saved. Continue with "
                                  f"`textnn train CONFIG --run-dir {self.run.path} --resume`", self._interrupted)


def _scalars(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
