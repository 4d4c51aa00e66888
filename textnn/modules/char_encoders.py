"""Character-level word features: a CNN (Ma & Hovy 2016), a BiLSTM (Lample et al. 2016), and the
multi-width CNN of Kim et al. 2016 that ELMo reads.

All take chars [B, T, C] (character ids of each word, 0 = padding, real characters first; a padding
token is an all-zero row) and return one feature vector per word, [B, T, F]. Only the real words
are encoded: the batch is flattened to [B*T, C] words, the rows with at least one character are
selected and cut to the longest of them, and the results are scattered back into a zero tensor, so
padding tokens cost nothing and come out as zero vectors (never NaN).
"""

# B batch, T words per sentence, C characters per word, N real words in the batch, E char embedding
# dim, F output features, H hidden size per direction

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from textnn.modules.conv import MultiWidthConv
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.pooling import masked_max
from textnn.modules.rnn import init_lstm_forget_bias

CHAR_PAD = 0


def _real_words(chars: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The words with at least one character: (their chars [N, C'], their rows in [B*T], lengths [N]),
    C' being the longest of them (>= 1)."""
    flat = chars.reshape(-1, chars.size(-1))  # [B, T, C] -> [B*T, C]
    lengths = (flat != CHAR_PAD).sum(dim=1)  # [B*T]
    rows = lengths.nonzero().squeeze(1)  # [N]
    lengths = lengths[rows]  # [N]
    longest = max(int(lengths.max()), 1) if rows.numel() else 1
    return flat[rows, :longest], rows, lengths


def _scatter_back(features: torch.Tensor, rows: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
    """Put the features [N, F] of the real words back in place: -> [B, T, F], zeros for padding tokens."""
    batch, steps, _ = chars.shape
    out = features.new_zeros(batch * steps, features.size(-1))  # [B*T, F]
    out = out.index_copy(0, rows, features)
    return out.view(batch, steps, -1)  # [B*T, F] -> [B, T, F]


class CharCNN(nn.Module):
    """Character embeddings -> dropout -> convolution -> tanh -> max over the word's characters.

    Ma & Hovy (2016), "End-to-end Sequence Labeling via Bi-directional LSTM-CNNs-CRF", §2.1 and
    Figure 1: dropout on the character embeddings before the CNN; Table 1: 30-d character
    embeddings, 30 filters of width 3, dropout 0.5. The convolution is "wide" (zero padding of
    width-1 characters on both sides, so every window touching a real character counts, even for
    one-character words) with a tanh, as in the authors' LasagneNLP code (Conv1DLayer, pad='full').
    Windows that lie entirely in a word's padding are left out of the max.
    chars [B, T, C] -> [B, T, num_filters].
    """

    def __init__(self, num_chars: int, char_dim: int, num_filters: int, width: int, dropout: float) -> None:
        super().__init__()
        self.embedding = TokenEmbedding(num_chars, char_dim, CHAR_PAD)
        self.dropout = Dropout(dropout)
        self.conv = nn.Conv1d(char_dim, num_filters, width, padding=width - 1)
        self.width = width
        self.output_size = num_filters

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        words, rows, lengths = _real_words(chars)  # [N, C'], [N], [N]
        if rows.numel() == 0:  # no real word at all: nothing to run
            return chars.new_zeros(*chars.shape[:2], self.output_size, dtype=self.embedding.weight.dtype)
        longest = words.size(1)
        real = torch.arange(longest, device=chars.device) < lengths.unsqueeze(1)  # [N, C']
        x = self.dropout(self.embedding(words)).masked_fill(~real.unsqueeze(2), 0.0)  # [N, C', E]
        h = torch.tanh(self.conv(x.transpose(1, 2))).transpose(1, 2)  # [N, E, C'] -> [N, F, C'+W-1] -> [N, C'+W-1, F]
        # Window j covers characters j-W+1 .. j: it touches a real character iff j < length + W - 1.
        windows = torch.arange(h.size(1), device=chars.device) < (lengths + self.width - 1).unsqueeze(1)  # [N, C'+W-1]
        return _scatter_back(masked_max(h, windows), rows, chars)  # [N, F] -> [B, T, F]


class CharLSTM(nn.Module):
    """Character embeddings -> BiLSTM over each word -> final forward and backward states, concatenated.

    Lample et al. (2016), "Neural Architectures for Named Entity Recognition", §4.1 and Figure 4: the
    forward LSTM's state after the last character and the backward LSTM's state after the first,
    25 units each, on 25-d character embeddings. Packed, so a word's padding is never read; the
    forget-gate bias starts at 1 (Jozefowicz et al. 2015, `modules.rnn.init_lstm_forget_bias`).
    chars [B, T, C] -> [B, T, 2 * hidden_size].
    """

    def __init__(self, num_chars: int, char_dim: int, hidden_size: int) -> None:
        super().__init__()
        self.embedding = TokenEmbedding(num_chars, char_dim, CHAR_PAD)
        self.lstm = nn.LSTM(char_dim, hidden_size, batch_first=True, bidirectional=True)
        init_lstm_forget_bias(self.lstm, 1.0)
        self.output_size = 2 * hidden_size

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        words, rows, lengths = _real_words(chars)  # [N, C'], [N], [N]
        if rows.numel() == 0:  # no real word at all: nothing to run
            return chars.new_zeros(*chars.shape[:2], self.output_size, dtype=self.embedding.weight.dtype)
        packed = pack_padded_sequence(self.embedding(words), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)  # h_n [2, N, H]: forward final state, backward final state
        return _scatter_back(torch.cat([h_n[0], h_n[1]], dim=-1), rows, chars)  # [N, 2H] -> [B, T, 2H]


class MultiWidthCharCNN(nn.Module):
    """Character embeddings -> convolutions of several widths, each with its own number of filters ->
    ReLU -> max over the word's windows, concatenated: the word representation of Kim et al. (2016),
    "Character-Aware Neural Language Models" (§2.2), that ELMo reads (Peters et al. 2018 §3.1).

    chars [B, T, C] (0 = padding, real characters first) -> [B, T, sum of the counts]. The windows are
    those of `modules.conv.MultiWidthConv` (a word shorter than a filter is zero-padded to one window),
    so a word gives the same vector however long the batch's longest word is.
    """

    def __init__(self, num_chars: int, char_dim: int, widths: list[int], counts: list[int]) -> None:
        super().__init__()
        self.embedding = TokenEmbedding(num_chars, char_dim, CHAR_PAD)
        self.conv = MultiWidthConv(char_dim, counts, widths)
        self.output_size = self.conv.output_size

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        words, rows, _ = _real_words(chars)  # [N, C'], [N]
        if rows.numel() == 0:
            return chars.new_zeros(*chars.shape[:2], self.output_size, dtype=self.embedding.weight.dtype)
        features = self.conv(self.embedding(words), words != CHAR_PAD)  # [N, C', E] -> [N, F]
        return _scatter_back(features, rows, chars)  # [N, F] -> [B, T, F]
