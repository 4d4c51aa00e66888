"""Token embeddings: a lookup table with a zero padding row, optional pretrained init and freezing."""

from __future__ import annotations

import torch
from torch import nn

from textnn.errors import TextnnError


def check_pretrained(pretrained: torch.Tensor, vocab_size: int, dim: int, field: str) -> None:
    """Raise a TextnnError unless `pretrained` is a float [vocab_size, dim] tensor.

    `field` names the config key that sets `dim`, so the message says what to change. A mismatched
    dimension is an error rather than silently overriding the config: the run's saved config must
    rebuild the same model later, when no vectors are passed.
    """
    if not isinstance(pretrained, torch.Tensor) or not pretrained.is_floating_point() or pretrained.dim() != 2:
        got = (f"{pretrained.dtype} {tuple(pretrained.shape)}" if isinstance(pretrained, torch.Tensor)
               else type(pretrained).__name__)
        raise TextnnError(f"pretrained word vectors must be a 2-D float tensor [vocab, dim], got {got}")
    rows, cols = pretrained.shape
    if rows != vocab_size:
        raise TextnnError(f"pretrained word vectors have {rows} rows but the vocabulary has {vocab_size} "
                          "tokens; build the vector matrix from the run's vocabulary")
    if cols != dim:
        raise TextnnError(f"pretrained word vectors have dimension {cols} but {field} = {dim}; "
                          f"set {field}={cols}")


class TokenEmbedding(nn.Embedding):
    """`nn.Embedding` with the padding row fixed at zero, optional pretrained vectors and freezing.

    Random init is N(0, 1/dim) so that an embedding's expected norm is ~1 whatever the dimension.
    Pretrained vectors are copied (the padding row is then zeroed); `freeze=True` turns off their
    gradient, so they get none and an optimizer step leaves them unchanged.
    """

    def __init__(self, vocab_size: int, dim: int, pad_id: int, pretrained: torch.Tensor | None = None,
                 freeze: bool = False, field: str = "model.embedding_dim") -> None:
        if not 0 <= pad_id < vocab_size:
            raise TextnnError(f"pad id {pad_id} is outside the vocabulary of {vocab_size} tokens")
        super().__init__(vocab_size, dim, padding_idx=pad_id)
        with torch.no_grad():
            if pretrained is None:
                nn.init.normal_(self.weight, std=dim ** -0.5)
            else:
                check_pretrained(pretrained, vocab_size, dim, field)
                self.weight.copy_(pretrained)
            self.weight[pad_id].zero_()
        self.weight.requires_grad_(not freeze)
