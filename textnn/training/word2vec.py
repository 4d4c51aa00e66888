"""The training loop of word2vec: plain SGD with sparse row-wise updates, many windows per step.

Why not `Trainer`: word2vec's speed comes from touching only the rows of the words in play, with
a learning rate decaying linearly over the words read (Mikolov et al. 2013a; word2vec.c). A dense
optimizer step over the [V, D] tables would cost the whole vocabulary per step. So this loop
computes the gradient of the sigmoid losses by hand and adds it into the rows with `index_add_`,
for `model.batch_words` centre words at once (no Python loop per word or per pair). The shell
around the loop is `Trainer`'s own (training/session.py): run.json status, Ctrl-C and SIGTERM
finishing the step, saving the checkpoint and exiting, `--resume`, the progress bar, TensorBoard
and the final metrics records; the loop adds a resumable checkpoint at each epoch end (and every
train.checkpoint_every steps). With train.threads > 1 on the CPU the steps are trained by that
many worker processes on shared tables (`_Workers`).

One step, skip-gram (each word predicted from every word of its window): all the window's words
share the word's noise words (or its Huffman path), so the scores of a window are one small
matrix product [C, D] x [D, T] instead of C separate dot products per target; Ji et al. 2016
("Parallelizing Word2Vec in Shared and Distributed Memory", section 3) show that sharing keeps the
accuracy. CBOW predicts the word from the mean of its window's vectors, as word2vec.c does, and
adds the whole gradient of that mean to every window word (word2vec.c and gensim's cbow_mean=1);
it reads and writes only the window slots in use (`_cbow_step`). On the CPU, CBOW trains instead
word after word in a compiled loop, as word2vec.c does (training/word2vec_cpu.py: moving rows is
its whole cost, and the batched form pays for it in temporaries); skip-gram keeps the batched step.
"""

# N centre words in a step, C window slots (2 * window), T targets (1 + negatives, or the code length), D size

from __future__ import annotations

import math
import os
import queue
import signal
import time

import torch
import torch.nn.functional as F

from textnn.config import TrainConfig
from textnn.errors import TextnnError
from textnn.models.word2vec import seed_of
from textnn.runs import RunDir
from textnn.training import distributed, word2vec_cpu
from textnn.training.checkpoint import save_weights
from textnn.training.session import STOP_SIGNALS, TrainingSession, scalars, train_record_due
from textnn.training.trainer import TrainResult, resolve_device


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
    if cbow:
        return _cbow_step(inputs, outputs, context, context_mask, targets, labels, weights, lr)
    ctx = F.embedding(context, inputs)  # [N, C, D] (faster than inputs[context] on the CPU)
    out = F.embedding(targets, outputs)  # [N, T, D]
    mask = context_mask.to(ctx.dtype)
    # the shares of rows updated by several windows (ROW_SHARE), folded into the small error terms
    # rather than into the [*, D] updates
    share_in = _share(context, mask, inputs.shape[0]).to(ctx.dtype)  # [N, C]
    share_out = _share(targets, weights, outputs.shape[0]).to(ctx.dtype)  # [N, T]
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


def _cbow_step(inputs: torch.Tensor, outputs: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor,
               targets: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, lr: float) -> torch.Tensor:
    """`sgd_step` for CBOW (see `_window_means` for the input side)."""
    dim = inputs.shape[1]
    used, owner, hidden, sizes = _window_means(inputs, context, context_mask)
    weights = weights * (sizes > 0).unsqueeze(1)  # a word alone in its sentence predicts nothing
    out = F.embedding(targets, outputs)  # [N, T, D]
    scores = torch.bmm(out, hidden.unsqueeze(2)).squeeze(2)  # [N, T]
    g = (labels - torch.sigmoid(scores)) * weights * lr  # [N, T]
    share_out = _share(targets, weights, outputs.shape[0]).to(g.dtype)  # [N, T]
    grad_out = (g * share_out).unsqueeze(2) * hidden.unsqueeze(1)  # [N, T, D]
    grad_hidden = torch.bmm(g.unsqueeze(1), out).squeeze(1)  # [N, D]
    loss = -(F.logsigmoid(torch.where(labels > 0, scores, -scores)) * weights).sum()
    _add_to_window_words(inputs, used, owner, grad_hidden)
    outputs.index_add_(0, targets.reshape(-1), grad_out.reshape(-1, dim))  # [N*T, D]
    return loss


@torch.no_grad()
def cbow_shared_noise_step(inputs: torch.Tensor, outputs: torch.Tensor, context: torch.Tensor,
                           context_mask: torch.Tensor, words: torch.Tensor, noise: torch.Tensor, group: int,
                           lr: float) -> torch.Tensor:
    """One SGD step of CBOW with negative sampling where groups of `group` words share noise words.

    context [N, C], context_mask [N, C] as in `sgd_step`; words [N] the words predicted; noise [B, K]
    the noise words of each group (B = ceil(N / group)), word i being in group i % B. The loss and its gradient are those of
    `sgd_step` with targets [word, noise of its group] and a noise word equal to the word dropped;
    what changes is the cost: the scores of a group against its noise words are one [G, D] x [D, K]
    product, and a noise row is gathered and updated once per group instead of once per word (as Ji
    et al. 2016, section 3, share them among the words of a skip-gram window). The updates of a row
    are shared out as in `sgd_step` (ROW_SHARE), a noise row counting once for every word of its group.
    Returns the summed loss (a 0-d tensor)."""
    n, dim = context.shape[0], inputs.shape[1]
    groups, k = noise.shape
    used, owner, hidden, sizes = _window_means(inputs, context, context_mask)
    alive = (sizes > 0).to(hidden.dtype)  # [N] a word alone in its sentence predicts nothing
    padded = groups * group - n  # the last group may be short: padded with words that count for nothing
    # word i is in group i % B: the words of a group lie B apart, so their windows do not overlap
    # (groups of neighbours, whose windows are nearly the same, push the shared noise rows B times
    # harder in one direction, and the vectors were much worse)
    hidden_g = F.pad(hidden, (0, 0, 0, padded)).view(group, groups, dim).transpose(0, 1)  # [B, G, D]
    words_g = F.pad(words, (0, padded), value=-1).view(group, groups).t()  # [B, G]
    alive_g = F.pad(alive, (0, padded)).view(group, groups).t()  # [B, G]
    noise_weight = (noise.unsqueeze(1) != words_g.unsqueeze(2)) * alive_g.unsqueeze(2)  # [B, G, K]
    positive = F.embedding(words, outputs)  # [N, D]
    negative = F.embedding(noise, outputs)  # [B, K, D]
    score_pos = (positive * hidden).sum(1)  # [N]
    score_neg = torch.bmm(hidden_g, negative.transpose(1, 2))  # [B, G, K]
    g_pos = (1 - torch.sigmoid(score_pos)) * alive * lr  # [N]
    g_neg = -torch.sigmoid(score_neg) * noise_weight * lr  # [B, G, K]
    loss = -(F.logsigmoid(score_pos) * alive).sum() - (F.logsigmoid(-score_neg) * noise_weight).sum()
    # ROW_SHARE: n = the words that use the row as their word or as one of their noise words
    rows = torch.cat([words, noise.reshape(-1)])  # [N + B*K]
    uses = torch.cat([alive, noise_weight.sum(1).reshape(-1)])  # [N + B*K]
    counts = torch.bincount(rows, weights=uses, minlength=outputs.shape[0])  # [V]
    share = counts[rows].clamp(min=1).pow(-ROW_SHARE).to(hidden.dtype)  # [N + B*K]
    share_pos, share_neg = share[:n], share[n:].view(groups, 1, k)
    grad_mean_neg = torch.bmm(g_neg, negative).transpose(0, 1).reshape(-1, dim)[:n]  # [B, G, D] -> [N, D]
    grad_hidden = g_pos.unsqueeze(1) * positive + grad_mean_neg  # [N, D]
    grad_pos = (g_pos * share_pos).unsqueeze(1) * hidden  # [N, D]
    grad_neg = torch.bmm((g_neg * share_neg).transpose(1, 2), hidden_g)  # [B, K, D]
    _add_to_window_words(inputs, used, owner, grad_hidden)
    outputs.index_add_(0, words, grad_pos)
    outputs.index_add_(0, noise.reshape(-1), grad_neg.reshape(-1, dim))  # [B*K, D]
    return loss


def _window_means(inputs: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor):
    """CBOW's input side reads only the E window slots in use: the mean of each window is one
    `embedding_bag` over them, with no [N, C, D] gather of padded slots. CBOW makes one prediction
    per word, so moving rows, not arithmetic, is its whole cost.
    Returns used [E] (the window words, window after window), owner [E] (the window of each),
    hidden [N, D] (the means, 0 for an empty window), sizes [N]."""
    used = context[context_mask]  # [E]
    sizes = context_mask.sum(1)  # [N]
    owner = torch.repeat_interleave(torch.arange(len(sizes), device=context.device), sizes)  # [E]
    starts = sizes.cumsum(0) - sizes  # [N] where each window's words begin in `used`
    hidden = F.embedding_bag(used, inputs, starts, mode="sum")  # [N, D]
    hidden = hidden / sizes.clamp(min=1).unsqueeze(1).to(hidden.dtype)  # the mean (word2vec.c's cbow_mean)
    return used, owner, hidden, sizes


def _add_to_window_words(inputs: torch.Tensor, used: torch.Tensor, owner: torch.Tensor,
                         grad_hidden: torch.Tensor) -> None:
    """Add each window's update grad_hidden [N, D] to every word of it, shared out (ROW_SHARE): the
    whole gradient of the mean goes to every window word (word2vec.c, gensim's cbow_mean=1)."""
    share_in = _share(used, None, inputs.shape[0]).to(grad_hidden.dtype)  # [E]
    inputs.index_add_(0, used, grad_hidden.index_select(0, owner).mul_(share_in.unsqueeze(1)))  # [E, D]


# A row that n windows update in one step moves by n^(1 - ROW_SHARE) times their mean update. The
# plain sum (ROW_SHARE = 0, what n sequential SGD updates would give to first order) overshoots for
# the most frequent words: all n updates were computed from the same row, none saw the others, and
# a small vocabulary diverges; the mean (ROW_SHARE = 1) moves a frequent word once per step, too
# slowly. 1/4 kept skip-gram on WikiText-2 at gensim's analogy accuracy (benchmarks/word2vec_vs_gensim.py).
ROW_SHARE = 0.25


def _share(rows: torch.Tensor, used: torch.Tensor | None, size: int) -> torch.Tensor:
    """The factor n^-ROW_SHARE of each update to `rows` (any shape), n = the updates of that row in use
    (`used` > 0, same shape; None: all are)."""
    flat = rows.reshape(-1)  # [R]
    in_use = None if used is None else (used.reshape(-1) > 0).float()  # [R]
    counts = torch.bincount(flat, weights=in_use, minlength=size)  # [size]
    return counts[flat].clamp(min=1).pow(-ROW_SHARE).view(rows.shape)


def _gather(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """values[index] for a 1-d `values` and an index of any shape, by index_select (on the CPU about
    three times faster than advanced indexing, which the window and noise lookups of every step use)."""
    return values.index_select(0, index.reshape(-1)).view(index.shape)


def worker_processes(device: torch.device, threads: int) -> int:
    """How many worker processes train the steps for train.threads on `device`; 0 = this process does."""
    return threads if device.type == "cpu" and threads > 1 else 0


class _Workers:
    """Processes that train whole steps each on one core, all updating the same tables in shared
    memory without locks (Hogwild, Recht et al. 2011), as word2vec.c's threads and gensim's workers
    do: two steps rarely touch the same row at the same moment, and a lost update now and then costs
    nothing measurable. Processes rather than threads because a step is many small torch calls and
    threads would queue on the one interpreter lock between them.

    The trainer gives out steps (epoch, step, first word, end, learning rate) and counts them back, so
    the progress bar, the logs, the learning rate (from the words read by each step, as in the
    single-process run) and the checkpoints are its own. A step's random draws are seeded by
    (epoch, step) alone, so a worker draws what this process would have; the order in which the
    steps update the tables is what varies from run to run. Workers are forked: they share the
    corpus arrays with the trainer without a copy, and they ignore SIGINT and SIGTERM, which the
    trainer handles by giving out no more steps."""

    def __init__(self, trainer: "Word2VecTrainer", count: int):
        for table in (trainer.model.input, trainer.model.output):
            table.data.share_memory_()  # in place: the trainer's own tables become the shared ones
        context = torch.multiprocessing.get_context("fork")
        self.tasks, self.results = context.Queue(), context.Queue()
        self.processes = [context.Process(target=_work, args=(trainer, self.tasks, self.results, os.getpid()),
                                          name=f"word2vec-worker-{k}", daemon=True) for k in range(count)]
        for process in self.processes:
            process.start()

    def submit(self, epoch: int, index: int, start: int, end: int, lr: float) -> None:
        self.tasks.put((epoch, index, start, end, lr))

    def receive(self) -> tuple[int, float, float]:
        """(step, lr, summed loss) of the next step done."""
        while True:
            try:
                message = self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [process for process in self.processes if not process.is_alive()]
                if dead:
                    raise TextnnError(f"a word2vec worker process ended unexpectedly (exit code {dead[0].exitcode}); "
                                      f"resume the run with --resume, or set train.threads: 1") from None
                continue
            if message[0] == "error":
                raise TextnnError(f"a word2vec worker process failed: {message[1]}")
            return message[1:]

    def close(self) -> None:
        for _ in self.processes:
            self.tasks.put(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()


def _work(trainer: "Word2VecTrainer", tasks, results, parent: int) -> None:
    """A worker process's loop: train the steps given out until told to stop (None) or orphaned."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the trainer decides
    torch.set_num_threads(1)
    epoch, stream, sentence = None, None, None
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:  # the trainer was killed: nobody will read what this does
                return
            continue
        if task is None:
            return
        try:
            if task[0] != epoch:
                epoch = task[0]
                stream, sentence, _ = trainer._epoch_stream(epoch)
            _, index, start, end, lr = task
            loss = trainer._train_step(stream, sentence, start, end, (epoch, index), lr)
            results.put(("done", index, lr, float(loss)))
        except Exception as error:  # shown by the trainer, which stops the run
            results.put(("error", f"{type(error).__name__}: {error}"))
            return


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
        self.data = task.device_arrays(self.device)
        # train.threads > 1 on the CPU: that many worker processes (`_Workers`) train whole steps on
        # one core each; 0 = the steps run here, one after the other.
        self.processes = worker_processes(self.device, cfg.threads)
        # CBOW on the CPU trains word after word in a compiled loop (training/word2vec_cpu.py), compiled
        # here, before the clock starts and the workers are forked; elsewhere the batched `sgd_step`.
        self.cbow_on_cpu = (self.mcfg.architecture == "cbow" and self.device.type == "cpu"
                            and not (self.mcfg.loss == "negative" and self.mcfg.noise_group > 1))
        if self.cbow_on_cpu:
            word2vec_cpu.prepare()
        self.total_steps = sum(task.num_train_batches(epoch) for epoch in range(cfg.epochs))
        if cfg.max_steps:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        # run.json, Ctrl-C and SIGTERM, checkpoints, the progress bar, TensorBoard (training/session.py)
        self.session = TrainingSession(run, cfg, self.model, self.optimizer, self.total_steps)

    # ----------------------------------------------------------------------------------------------
    def _generator(self, *key: int) -> torch.Generator:
        """A generator for one (epoch, step, thread's part): a resumed run draws what the first would have."""
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed_of(self.cfg.seed, *key))
        return generator

    def _windows(self, stream: torch.Tensor, sentence: torch.Tensor, start: int, end: int,
                 generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The step's centre words with their windows: (centre [N_b], context [N_b, C], mask [N_b, C]).
        Skip-gram groups them by the window size b each drew (C = 2b), which spares the slots a full
        2 * window would leave empty (on average (window - 1) / (2 * window) of them); CBOW reads only
        the slots in use anyway (`_cbow_step`), so it takes all words in one group with C = 2 * window."""
        window = self.mcfg.window
        positions = torch.arange(start, end, device=self.device)  # [N]
        reach = self._reach(len(positions), generator)
        if self.mcfg.architecture == "cbow":
            return [self._window(stream, sentence, positions, window, reach)]
        order = torch.argsort(reach, stable=True)
        sizes = torch.bincount(reach, minlength=window + 1).tolist()
        groups, first = [], 0
        for size in range(1, window + 1):
            if not sizes[size]:
                continue
            centre = positions[order[first:first + sizes[size]]]  # [N_b]
            first += sizes[size]
            groups.append(self._window(stream, sentence, centre, size, None))
        return groups

    def _reach(self, words: int, generator: torch.Generator) -> torch.Tensor:
        """[words] window sizes, each drawn in 1..window (2013a section 3.1): near words count more."""
        return torch.randint(1, self.mcfg.window + 1, (words,), device=self.device, generator=generator)

    def _window(self, stream: torch.Tensor, sentence: torch.Tensor, centre: torch.Tensor, size: int,
                reach: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids [N], context [N, 2 * size], mask [N, 2 * size]) of the words at positions `centre`;
        `reach` [N], when given, masks the slots further than each word's own window."""
        offsets = torch.cat([torch.arange(-size, 0), torch.arange(1, size + 1)]).to(self.device)  # [2b]
        around = centre.unsqueeze(1) + offsets  # [N, 2b]
        inside = (around >= 0) & (around < len(stream))
        around = around.clamp(0, len(stream) - 1)
        same_line = _gather(sentence, around) == _gather(sentence, centre).unsqueeze(1)  # [N, 2b]
        mask = inside & same_line  # no window crosses a line
        if reach is not None:
            mask &= offsets.abs() <= reach.unsqueeze(1)
        return _gather(stream, centre), _gather(stream, around), mask

    def _targets(self, centre: torch.Tensor, generator: torch.Generator):
        """targets [N, T], labels [N, T], weights [N, T] of the centre words (see `sgd_step`)."""
        data = self.data
        if self.mcfg.loss == "hierarchical":
            targets = data["points"].index_select(0, centre)
            # word2vec.c: the label of a branch is 1 - its code bit
            labels = (1 - data["codes"].index_select(0, centre)).float()
            weights = data["path_mask"].index_select(0, centre).float()
            return targets, labels, weights
        noise = self._noise(len(centre), generator)  # [N, K]
        targets = torch.cat([centre.unsqueeze(1), noise], 1)  # [N, 1 + K]
        labels = torch.zeros(targets.shape, device=self.device)
        labels[:, 0] = 1
        weights = torch.ones(targets.shape, device=self.device)
        weights[:, 1:] = (noise != centre.unsqueeze(1)).float()  # word2vec.c skips a draw of the word itself
        return targets, labels, weights

    def _noise(self, rows: int, generator: torch.Generator) -> torch.Tensor:
        """[rows, K] noise words, each drawn from the unigram distribution to the 3/4 (the noise table)."""
        table = self.data["noise_table"]
        draws = torch.randint(len(table), (rows, self.mcfg.negative), device=self.device, generator=generator)
        return _gather(table, draws)

    def _train_step(self, stream: torch.Tensor, sentence: torch.Tensor, start: int, end: int,
                    key: tuple[int, int], lr: float) -> torch.Tensor:
        """Train the windows of words start..end of the epoch's stream; returns their summed loss.
        `key` (epoch, step) seeds the step's draws, wherever and whenever it runs."""
        generator = self._generator(*key, 0)
        mcfg, inputs, outputs = self.mcfg, self.model.input.data, self.model.output.data
        if self.cbow_on_cpu:  # the compiled loop reads the windows from the stream itself
            reach = self._reach(end - start, generator)  # [N]
            targets, labels, weights = self._targets(stream[start:end], generator)
            return word2vec_cpu.cbow_step(inputs, outputs, stream, sentence, start, reach, targets, labels, weights, lr)
        loss = torch.zeros((), device=self.device)
        for centre, context, mask in self._windows(stream, sentence, start, end, generator):
            if mcfg.architecture == "cbow" and mcfg.loss == "negative" and mcfg.noise_group > 1:
                noise = self._noise(-(-len(centre) // mcfg.noise_group), generator)  # [B, K]
                loss += cbow_shared_noise_step(inputs, outputs, context, mask, centre, noise, mcfg.noise_group, lr)
                continue
            targets, labels, weights = self._targets(centre, generator)
            loss += sgd_step(inputs, outputs, context, mask, targets, labels, weights, lr,
                             cbow=mcfg.architecture == "cbow")
        return loss

    def _epoch_stream(self, epoch: int):
        """The words of an epoch after subsampling: ids, sentence numbers and raw positions (for the lr)."""
        return self.task.subsample(epoch, self.cfg.seed, self.data)

    # ----------------------------------------------------------------------------------------------
    def fit(self, resume: bool = False) -> TrainResult:
        try:
            return self._fit(resume)
        finally:
            self.session.close()

    def _fit(self, resume: bool) -> TrainResult:
        run, session = self.run, self.session
        # words: corpus words of the finished epochs; epoch_words: read so far in the current one
        state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "seconds": 0.0, "words": 0, "epoch_words": 0}
        if resume:
            state = session.resume()
        session.begin(vocabulary=len(self.task.vocab), corpus_words=self.task.corpus_words,
                      dropped_words=self.task.dropped)
        # Workers are forked before the progress bar and the signal handlers: they inherit neither.
        workers = _Workers(self, self.processes) if self.processes else None
        started = time.perf_counter() - state["seconds"]
        try:
            with session.steps(state["step"]) as bar:
                stopped = self._train_epochs(state, started, bar, workers)
        finally:
            if workers is not None:
                workers.close()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        state["seconds"] = time.perf_counter() - started
        stopped = stopped or "completed"
        if not (torch.isfinite(self.model.input).all() and torch.isfinite(self.model.output).all()):
            self._diverged(state, float("nan"))
        session.save_checkpoint(state)
        save_weights(self.model, run.weights_file)
        self.task.write_vectors(self.model, run.path)
        dev = self.task.evaluate_split(self.model, "dev")
        test = self.task.evaluate_split(self.model, "test")
        session.record_final(scalars(dev), scalars(test), state["step"])
        seconds = max(state["seconds"], 1e-9)
        words = state["words"] + state["epoch_words"]
        metric = self.task.default_metric
        best = dev.get(metric) if dev else None
        result = TrainResult(steps=state["step"], epochs_completed=state["epoch"], train_seconds=seconds,
                             examples_per_second=words / seconds, tokens_per_second=words / seconds,
                             best_metric=best, best_step=state["step"] if dev else None, metric_name=metric,
                             higher_is_better=True, parameters=sum(p.numel() for p in self.model.parameters()),
                             dev=dev, test=test, stopped=stopped, device=str(self.device))
        return result  # the run is marked finished once its report is written (experiment.train)

    def _train_epochs(self, state: dict, started: float, bar, workers: "_Workers | None") -> str | None:
        """Train from `state` (updated step by step, checkpointed at each epoch end and every
        train.checkpoint_every steps) until the epochs are done or the run stops; returns why it
        stopped early (max_steps, max_minutes), None if it did not. `started`: the clock's start,
        less the seconds trained before a resume."""
        cfg, mcfg, session = self.cfg, self.mcfg, self.session
        corpus_words = self.task.corpus_words
        planned_words = corpus_words * cfg.epochs
        alpha, min_alpha = mcfg.start_alpha, mcfg.min_alpha
        # a resumed run may have nothing left to do (it stopped on this budget before)
        stopped = ("max_steps" if cfg.max_steps and state["step"] >= cfg.max_steps else
                   "max_minutes" if cfg.max_minutes and state["seconds"] >= 60 * cfg.max_minutes else None)
        # The loss summed over the steps since the last training record, their predictions, and the last step's
        # record without its loss; a checkpoint keeps them (state["unlogged"]), so that a resumed run averages
        # over the steps an uninterrupted one does, and writes the record of the run's last step as it does.
        unlogged = state.get("unlogged") or {"loss": 0.0, "predictions": 0, "record": None}
        log_loss = torch.tensor(unlogged["loss"], device=self.device)
        log_predictions, record = unlogged["predictions"], unlogged["record"]

        def keep_unlogged() -> None:  # before each checkpoint: every step given out is done
            state["unlogged"] = {"loss": float(log_loss), "predictions": log_predictions, "record": record}

        # steps given out (here or to the workers) and not yet reported back; a checkpoint is only
        # written when none is, so that it holds every step before state["batch_in_epoch"] and no other
        in_flight, ready = 0, []
        dispatched = state["step"]
        while state["epoch"] < cfg.epochs and not stopped:
            epoch = state["epoch"]
            stream, sentence, raw_position = self._epoch_stream(epoch)
            starts = range(0, len(stream), mcfg.batch_words)
            ends = [min(start + mcfg.batch_words, len(stream)) for start in starts]
            # corpus words read by the end of each step (one transfer per epoch, not one per step)
            read = (raw_position[torch.tensor(ends, dtype=torch.long, device=self.device) - 1] + 1).tolist()
            index, checkpoint_due = state["batch_in_epoch"], False
            while True:
                while (index < len(starts) and in_flight < (2 * self.processes or 1) and not checkpoint_due
                       and not stopped and not session.interrupted):
                    # Linear decay over the words read, as word2vec.c and gensim do (2013a section 4.2).
                    done = (epoch * corpus_words + read[index]) / planned_words
                    lr = max(min_alpha, alpha - (alpha - min_alpha) * done)
                    if workers is None:
                        ready.append((index, lr, self._train_step(stream, sentence, starts[index], ends[index],
                                                                  (epoch, index), lr)))
                    else:
                        workers.submit(epoch, index, starts[index], ends[index], lr)
                    index, in_flight, dispatched = index + 1, in_flight + 1, dispatched + 1
                    checkpoint_due = bool(cfg.checkpoint_every and dispatched % cfg.checkpoint_every == 0)
                    if cfg.max_steps and dispatched >= cfg.max_steps:
                        stopped = "max_steps"
                if not in_flight:
                    break  # the epoch's steps are done, or the run stops
                done_index, lr, loss = ready.pop() if ready else workers.receive()
                in_flight -= 1
                log_loss += loss
                log_predictions += ends[done_index] - starts[done_index]
                state["step"] += 1
                state["seconds"] = time.perf_counter() - started
                bar.update(1)
                words = state["words"] + read[done_index]
                speed = words / max(state["seconds"], 1e-9)
                record = {"step": state["step"], "epoch": epoch, "lr": lr, "words_per_s": speed,
                          "seconds": round(state["seconds"], 2)}
                if train_record_due(state["step"], cfg.log_every):
                    loss = self._record_train(state, record, log_loss, log_predictions)
                    bar.set_postfix(loss=f"{loss:.4f}", words_s=f"{speed:,.0f}", lr=f"{lr:.5f}",
                                    epoch=epoch + 1, refresh=False)
                    log_loss, log_predictions = torch.zeros((), device=self.device), 0
                if not stopped and cfg.max_minutes and state["seconds"] >= 60 * cfg.max_minutes:
                    stopped = "max_minutes"
                if not in_flight:  # every step given out is done: the state is whole
                    state["batch_in_epoch"] = index
                    state["epoch_words"] = read[index - 1]
                    if checkpoint_due:
                        keep_unlogged()
                        session.save_checkpoint(state)
                        checkpoint_due = False
            if index == len(starts):
                state["words"] += corpus_words
                state["epoch_words"] = 0
                state["epoch"] += 1
                state["batch_in_epoch"] = 0
                keep_unlogged()
                session.save_checkpoint(state)
            if session.interrupted:
                keep_unlogged()
                session.save_checkpoint(state)
                session.stop_interrupted(state)
        if log_predictions:  # the steps since the last record, at the run's last step: the curve reaches the end
            self._record_train(state, record, log_loss, log_predictions, last=True)
        keep_unlogged()  # for the final checkpoint: a resume with a larger budget goes on averaging
        return stopped

    def _record_train(self, state: dict, record: dict, loss_sum: torch.Tensor, predictions: int,
                      last: bool = False) -> float:
        """Write `record` with the mean loss per prediction of the steps since the last record; returns it."""
        loss = float(loss_sum) / max(predictions, 1)
        if not math.isfinite(loss):
            self._diverged(state, loss)
        self.session.record_train({"step": record["step"], "epoch": record["epoch"], "loss": loss, **record},
                                  last=last)
        return loss

    def _diverged(self, state: dict, loss: float) -> None:
        raise TextnnError(f"training diverged at step {state['step']} (loss {loss}): the vectors are no longer "
                          f"finite; start a new run with a lower model.alpha or model.batch_words")
