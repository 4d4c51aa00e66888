"""CBOW's CPU step as one compiled loop over the step's words (numba), the way word2vec.c trains.

Why a compiled loop: CBOW makes one prediction per word, so its cost is moving rows (gather the
window, update 1 + K output rows, add the error to every window word), not arithmetic. As batched
torch operations that is a [N, T, D] gather, a scatter-add and their temporaries per step, about
four times the time of the same work done row by row in place (1.7 against 7.8 ms per step of
2,048 WikiText-2 words, one thread). Skip-gram's windows share their targets
and make a real matrix product, so it stays in torch (`sgd_step`).

The loop is word2vec.c's CBOW (Mikolov et al. 2013a; cbow_mean=1, as gensim): for each word in
turn, h = the mean of the input vectors of its window (the words within its drawn reach on either
side, in its own line, read straight from the stream); for each target t (the word and its noise words,
or the nodes of its Huffman path) with weight w_t and label l_t, g = lr * w_t * (l_t - sigmoid(h .
o_t)), the error e += g * o_t, then o_t += g * h; finally e is added to every window word's input
vector. Words are trained one after the other, each seeing the updates of those before it, so no
update is lost or shared out (unlike the batched `sgd_step`, which needs ROW_SHARE); the exact
sigmoid replaces word2vec.c's table. numba is imported on first use only, and the compiled loop is
cached on disk (`cache=True`), so compiling is paid once per installation (loading it again: about
half a second per run).
"""

# N words in the step, L words in the epoch's stream, T targets per word (1 + negatives, or the code
# length), D size

from __future__ import annotations

import math

import numpy as np
import torch

_KERNEL = None


def _compiled():
    """The numba-compiled loop, compiled (or read from numba's cache) and run once on a toy step, so
    that the first training step does not pay for it (about half a second)."""
    global _KERNEL
    if _KERNEL is None:
        import numba

        kernel = numba.njit(cache=True, fastmath=True)(_cbow_loop)
        table, ids = np.zeros((1, 1), np.float32), np.zeros(1, np.int64)
        kernel(table, table.copy(), ids, ids, 0, ids, ids.reshape(1, 1), table, table, 0.0)
        _KERNEL = kernel
    return _KERNEL


def _cbow_loop(inputs, outputs, stream, sentence, start, reach, targets, labels, weights, lr):  # pragma: no cover
    dim = inputs.shape[1]
    hidden = np.empty(dim, np.float32)
    error = np.empty(dim, np.float32)
    loss = 0.0
    for n in range(targets.shape[0]):
        # the window: up to reach[n] words on either side, within the stream and the word's own line
        centre = start + n
        first, last = max(centre - reach[n], 0), min(centre + reach[n], len(stream) - 1)
        count = 0
        hidden[:] = 0.0
        for position in range(first, last + 1):
            if position != centre and sentence[position] == sentence[centre]:
                count += 1
                row = inputs[stream[position]]
                for d in range(dim):
                    hidden[d] += row[d]
        if count == 0:  # a word alone in its line predicts nothing
            continue
        scale = np.float32(1.0 / count)
        for d in range(dim):
            hidden[d] *= scale
        error[:] = 0.0
        for t in range(targets.shape[1]):
            weight = weights[n, t]
            if weight == 0.0:
                continue
            row = outputs[targets[n, t]]
            score = np.float32(0.0)
            for d in range(dim):
                score += hidden[d] * row[d]
            # log sigmoid(+-score) and sigmoid(score) from one exp(-|score|), stable for any score
            small = math.exp(-abs(score))
            signed = score if labels[n, t] > 0 else -score
            loss -= weight * (min(signed, 0.0) - math.log1p(small))
            sigmoid = 1.0 / (1.0 + small) if score >= 0 else small / (1.0 + small)
            g = np.float32((labels[n, t] - sigmoid) * weight * lr)
            for d in range(dim):
                error[d] += g * row[d]
                row[d] += g * hidden[d]
        for position in range(first, last + 1):
            if position != centre and sentence[position] == sentence[centre]:
                row = inputs[stream[position]]
                for d in range(dim):
                    row[d] += error[d]
    return loss


def prepare() -> None:
    """Compile the loop now (a trainer calls this before its clock starts and before it forks workers)."""
    _compiled()


@torch.no_grad()
def cbow_step(inputs: torch.Tensor, outputs: torch.Tensor, stream: torch.Tensor, sentence: torch.Tensor, start: int,
              reach: torch.Tensor, targets: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor,
              lr: float) -> torch.Tensor:
    """One CBOW step on CPU tables, in place, word after word (see the module docstring): the N words
    at positions start .. start + N - 1 of the epoch's `stream` [L] (word ids; `sentence` [L] the line
    of each), each predicted from the words within reach [N] positions on either side in its own
    line. inputs [V, D] and outputs [V, D] are float32 tables; targets / labels / weights [N, T] as
    in `training.word2vec.sgd_step`. Returns the summed loss (a 0-d tensor)."""
    loss = _compiled()(inputs.numpy(), outputs.numpy(), stream.numpy(), sentence.numpy(), int(start), reach.numpy(),
                       targets.numpy(), labels.numpy(), weights.numpy(), float(lr))
    return torch.tensor(loss)
