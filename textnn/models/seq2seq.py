"""RNN encoder-decoders for translation, without and with attention.

Without attention the source is read into the encoder's final state, the single vector the decoder
starts from (the bottleneck attention removes):
- Sutskever, Vinyals & Le (2014), "Sequence to Sequence Learning with Neural Networks": stacked LSTMs,
  the decoder starts from the encoder's final states (`bridge=false`, §2), the source read backwards
  (`reverse_source`, §3.3: "reversing the order of the words in all source sentences" shortens the
  distance between the first words of source and target).
- Cho et al. (2014), "Learning Phrase Representations using RNN Encoder-Decoder for Statistical Machine
  Translation", §2.2: the summary c of the source feeds every decoder step, h_t = f(h_{t-1}, y_{t-1}, c),
  and the output, P(y_t) = g(h_t, y_{t-1}, c) (`context_every_step`); the decoder starts from
  tanh(V' c) (appendix A.1.1), the `bridge`.

With attention (modules/attention.py, any score function) the decoder reads every encoder state:
- Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly Learning to Align and
  Translate" (`arrangement=bahdanau`): a bidirectional encoder (§3.2); at target step i the previous
  decoder state s_{i-1} attends (eq. 6: e_ij = a(s_{i-1}, h_j)), the context c_i enters the cell with
  y_{i-1} (s_i = f(s_{i-1}, y_{i-1}, c_i), eq. 4), and the output reads (s_i, c_i, y_{i-1}) (eq. 4,
  g(y_{i-1}, s_i, c_i)) through one tanh layer where the paper has a maxout layer (appendix A.2.2).
  The decoder starts from tanh(W_s h) of the encoder's final states (appendix A.2.2 uses the backward
  state alone; here both directions').
- Luong, Pham & Manning (2015), "Effective Approaches to Attention-based Neural Machine Translation"
  (`arrangement=luong`): the current state h_t attends (§3, "h_t -> a_t -> c_t -> h~_t"), the
  attentional hidden state h~_t = tanh(W_c [c_t; h_t]) (eq. 5) is the output, and with
  `input_feeding` (§3.3) h~_{t-1} joins the next step's input, so the model knows its past alignments.

Speed: the encoder is one packed, fused nn.GRU / nn.LSTM call (cuDNN on GPU). The decoder runs as one
fused call over all target positions whenever the cell's input does not depend on the attention at
the same step (no attention, Cho's context, Luong without input feeding: the attention then reads all
the decoder's states at once); only Bahdanau's arrangement and Luong's input feeding loop over time.

encode -> Seq2SeqMemory; decode / start / step / reorder: the `EncoderDecoder` contract (models/base.py).
Target padding needs no mask: the decoder reads left to right, so a real position never sees the
padding after it.
"""

# B batch, S source length, T target length (T' new tokens of a step), E embedding size,
# He encoder hidden size per direction, K encoder directions (1 or 2), Dk = K * He encoder state size,
# H decoder hidden size, L layers, A attention size, B' rows kept by reorder

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, opt
from textnn.models.base import (DecoderOutput, EncoderDecoder, InputSpec, LayerGroups, require_bools, require_choice,
                                require_ints, require_probabilities)
from textnn.modules.attention import SCORES, Attended, make_attention
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.rnn import RNNEncoder, init_lstm_forget_bias

CELLS = ("gru", "lstm")
ARRANGEMENTS = ("bahdanau", "luong")
# The recurrent state: (h, c) for an LSTM, h for a GRU, each [L, B, H].
RNNState = Union[tuple[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Seq2SeqConfig(ModelOptions):
    cell: str = opt("gru", "recurrent cell of the encoder and the decoder: gru or lstm")
    embedding_dim: int = opt(256, "source and target embedding size E")
    encoder_hidden: int = opt(256, "encoder hidden size He per direction (its states are K * He)")
    hidden_size: int = opt(512, "decoder hidden size H (and the size of the states the output layer reads)")
    num_layers: int = opt(1, "stacked recurrent layers L, in the encoder and in the decoder")
    bidirectional: bool = opt(True, "bidirectional encoder (Bahdanau et al. 2015, §3.2): states [forward; backward]")
    bridge: bool = opt(True, "start each decoder layer from tanh(W h) of the encoder layer's final states (Cho "
                             "et al. 2014, A.1.1); false: copy them (Sutskever et al. 2014), which needs a "
                             "unidirectional encoder with encoder_hidden = hidden_size")
    reverse_source: bool = opt(False, "read each source sentence backwards (Sutskever et al. 2014, §3.3); padding "
                                      "stays at the end and attention weights stay in source order")
    context_every_step: bool = opt(False, "without attention: feed the source summary c to every decoder step and "
                                          "to the output layer (Cho et al. 2014, §2.2)")
    attention: str = opt("none", f"attention score function: none, {', '.join(SCORES)} (modules/attention.py)")
    arrangement: str = opt("bahdanau", "with attention: bahdanau (the previous state attends, the context enters "
                                       "the cell) or luong (the current state attends, output tanh(W_c [c; h]))")
    attention_size: int = opt(256, "additive / concat attention: size A of v^T tanh(W q + U k)")
    input_feeding: bool = opt(False, "luong: feed the previous attentional state h~ into the next step's input "
                                     "(Luong et al. 2015, §3.3); the decoder then loops over time")
    max_source_positions: int = opt(100, "location attention: the longest source it can score (one learned "
                                         "score per position, Luong et al. 2015 eq. 9)")
    dropout: float = opt(0.0, "dropout on the embeddings, between stacked layers and on the decoder's output states", retunable=True)

    def __post_init__(self) -> None:
        require_choice(self, "cell", CELLS)
        require_ints(self, "embedding_dim", "encoder_hidden", "hidden_size", "num_layers", "attention_size",
                     "max_source_positions")
        require_bools(self, "bidirectional", "bridge", "reverse_source", "context_every_step", "input_feeding")
        _check(self.attention in ("none", *SCORES), "attention", self.attention, f"none or one of {', '.join(SCORES)}")
        require_choice(self, "arrangement", ARRANGEMENTS)
        require_probabilities(self, "dropout", expected="a number in [0, 1)")
        _check(not (self.context_every_step and self.attention != "none"), "context_every_step", True,
               "false with attention (the attention's context already reaches every step); or set model.attention=none")
        _check(not self.input_feeding or (self.attention != "none" and self.arrangement == "luong"), "input_feeding",
               True, "false unless model.attention is set and model.arrangement=luong")
        _check(self.bridge or (not self.bidirectional and self.encoder_hidden == self.hidden_size), "bridge", False,
               f"true, or a unidirectional encoder (model.bidirectional=false) with model.encoder_hidden = "
               f"model.hidden_size = {self.hidden_size}: copied states must fit the decoder")
        if self.attention in ("dot", "scaled_dot", "cosine"):
            _check(self.state_size == self.hidden_size, "attention", self.attention,
                   f"a score with weights (general, additive) or encoder states of the decoder's size: {self.attention} "
                   f"compares the decoder state (hidden_size = {self.hidden_size}) with encoder states of "
                   f"{self.state_size} (encoder_hidden x directions)")

    @property
    def state_size(self) -> int:
        """Dk: the size of the encoder's states (both directions)."""
        return self.encoder_hidden * (2 if self.bidirectional else 1)


@dataclass
class Seq2SeqMemory:
    """What `encode` gives the decoder: everything of the source it may read."""

    states: torch.Tensor  # [B, S, Dk] encoder states, in source order
    mask: torch.Tensor  # [B, S] bool, True = real source token
    keys: torch.Tensor | None  # the attention's prepared keys (U h, W h, ...), once per sentence; None without attention
    hidden: RNNState  # the decoder's initial state, [L, B, H] (LSTM: (h, c))
    context: torch.Tensor | None  # [B, Dk] the source summary fed at every step (context_every_step), else None


@dataclass
class Seq2SeqState:
    """The decoding state `step` carries: the memory, the decoder's recurrent state, the fed-back output."""

    memory: Seq2SeqMemory
    hidden: RNNState  # [L, B, H] (LSTM: (h, c))
    feed: torch.Tensor | None  # [B, H] h~ of the previous step (input feeding), else None


def reverse_within(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reverse each row's real positions, padding left at the end: x [B, S, ...], mask [B, S] -> [B, S, ...].

    Its own inverse, so it also puts states computed on reversed input back in source order.
    """
    length = x.size(1)
    lengths = mask.sum(dim=1, keepdim=True)  # [B, 1]
    positions = torch.arange(length, device=x.device)[None, :]  # [1, S]
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)  # [B, S]
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)  # [B, S] -> [B, S, ...]
    return x.gather(1, index)


def _top(hidden: RNNState) -> torch.Tensor:
    """The top layer's hidden state: [L, B, H] -> [B, H]."""
    return hidden[0][-1] if isinstance(hidden, tuple) else hidden[-1]


def _rows(hidden: RNNState, indices: torch.Tensor) -> RNNState:
    """Rows `indices` of a recurrent state (batch on dim 1): [L, B, H] -> [L, B', H]."""
    if isinstance(hidden, tuple):
        return tuple(h.index_select(1, indices) for h in hidden)
    return hidden.index_select(1, indices)


class Seq2Seq(EncoderDecoder):
    """RNN encoder-decoder, with or without attention; see the module docstring."""

    config_class = Seq2SeqConfig

    def __init__(self, cfg: Seq2SeqConfig, source: InputSpec, target: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        e, h, dk, layers = cfg.embedding_dim, cfg.hidden_size, cfg.state_size, cfg.num_layers
        between = cfg.dropout if layers > 1 else 0.0  # torch warns on inter-layer dropout with one layer
        self.src_embedding = TokenEmbedding(source.vocab_size, e, source.pad_id)
        self.encoder = RNNEncoder(e, cfg.encoder_hidden, cfg.cell, layers, cfg.bidirectional, cfg.dropout)
        self.bridge = nn.Linear(dk, h) if cfg.bridge else None
        # An LSTM's memory cells are not squashed by tanh, so they get their own linear bridge.
        self.bridge_cell = nn.Linear(dk, h) if cfg.bridge and cfg.cell == "lstm" else None

        self.tgt_embedding = TokenEmbedding(target.vocab_size, e, target.pad_id)
        attends = cfg.attention != "none"
        bahdanau = attends and cfg.arrangement == "bahdanau"
        # The cell reads y_{t-1}, plus c (Cho), c_i (Bahdanau) or h~_{t-1} (input feeding).
        cell_input = e + (dk if cfg.context_every_step or bahdanau else 0) + (h if cfg.input_feeding else 0)
        rnn_cls = nn.LSTM if cfg.cell == "lstm" else nn.GRU
        self.rnn = rnn_cls(cell_input, h, layers, batch_first=True, dropout=between)
        if cfg.cell == "lstm":
            init_lstm_forget_bias(self.rnn, 1.0)
        self.attention = make_attention(cfg.attention, h, dk, cfg.attention_size, cfg.max_source_positions) \
            if attends else None
        if cfg.context_every_step or bahdanau:  # g(h_t, y_{t-1}, c): one tanh layer over [h; c; y]
            self.readout = nn.Linear(h + dk + e, h)
        elif attends:  # Luong eq. 5: h~ = tanh(W_c [c; h]), no bias
            self.readout = nn.Linear(dk + h, h, bias=False)
        else:  # Sutskever: the output layer reads the top decoder state itself
            self.readout = None
        self.drop = Dropout(cfg.dropout)
        self.token_size = h

    @classmethod
    def max_length(cls, cfg: Seq2SeqConfig) -> int:
        return cfg.max_source_positions if cfg.attention == "location" else 0

    def layer_groups(self) -> LayerGroups:
        """Source side (embedding, encoder), the bridge, target side (embedding, decoder cell), then the
        attention and the output layer: from the input up."""
        named = [("source", [self.src_embedding, self.encoder]), ("bridge", [self.bridge, self.bridge_cell]),
                 ("target", [self.tgt_embedding, self.rnn]), ("attention", [self.attention]),
                 ("readout", [self.readout])]
        groups = [(name, [m for m in modules if m is not None]) for name, modules in named]
        return [(name, modules) for name, modules in groups if any(True for m in modules for _ in m.parameters())]

    # ------------------------------------------------------------------------------------------ encode
    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> Seq2SeqMemory:
        """src_ids [B, S], src_mask [B, S] (real tokens first) -> Seq2SeqMemory."""
        cfg = self.cfg
        ids = reverse_within(src_ids, src_mask) if cfg.reverse_source else src_ids
        states, final = self.encoder.forward_with_final(self.drop(self.src_embedding(ids)), src_mask)  # [B, S, Dk]
        if cfg.reverse_source:
            states = reverse_within(states, src_mask)  # back in source order, for attention and its pictures
        finals = final if isinstance(final, tuple) else (final,)
        directions, batch = (2 if cfg.bidirectional else 1), src_ids.size(0)
        # h_n [L*K, B, He] -> [L, K, B, He] -> [L, B, K, He] -> [L, B, Dk]: each layer's directions side by side
        finals = [f.view(cfg.num_layers, directions, batch, cfg.encoder_hidden).transpose(1, 2)
                  .reshape(cfg.num_layers, batch, cfg.state_size) for f in finals]
        if cfg.bridge:
            hidden = [torch.tanh(self.bridge(finals[0]))]  # [L, B, H]
            if self.bridge_cell is not None:
                hidden.append(self.bridge_cell(finals[1]))  # [L, B, H]
        else:
            hidden = finals
        hidden = tuple(hidden) if cfg.cell == "lstm" else hidden[0]
        keys = self.attention.prepare(states) if self.attention is not None else None
        context = finals[0][-1] if cfg.context_every_step else None  # [B, Dk]: the top layer's final state
        return Seq2SeqMemory(states=states, mask=src_mask, keys=keys, hidden=hidden, context=context)

    # ------------------------------------------------------------------------------------------ decode
    def start(self, memory: Seq2SeqMemory) -> Seq2SeqState:
        feed = memory.states.new_zeros(memory.states.size(0), self.cfg.hidden_size) if self.cfg.input_feeding \
            else None  # h~_0 = 0
        return Seq2SeqState(memory=memory, hidden=memory.hidden, feed=feed)

    def _attend(self, query: torch.Tensor, memory: Seq2SeqMemory) -> Attended:
        return self.attention.attend(query, memory.keys, memory.states, memory.mask)

    def _run(self, ids: torch.Tensor, state: Seq2SeqState) -> tuple[torch.Tensor, Seq2SeqState, torch.Tensor | None]:
        """Read target tokens ids [B, T] after `state`: (output states [B, T, H], the new state,
        attention weights [B, T, S] or None)."""
        cfg, memory = self.cfg, state.memory
        emb = self.drop(self.tgt_embedding(ids))  # [B, T, E]
        length = ids.size(1)
        if self.attention is None:
            if cfg.context_every_step:
                context = memory.context[:, None, :].expand(-1, length, -1)  # [B, Dk] -> [B, T, Dk]
                out, hidden = self.rnn(torch.cat([emb, context], dim=-1), state.hidden)  # [B, T, H]
                out = torch.tanh(self.readout(torch.cat([out, context, emb], dim=-1)))  # [B, T, H]
            else:
                out, hidden = self.rnn(emb, state.hidden)  # [B, T, H]
            return self.drop(out), replace(state, hidden=hidden), None
        if cfg.arrangement == "luong" and not cfg.input_feeding:  # every state first, then attention over all of them
            out, hidden = self.rnn(emb, state.hidden)  # [B, T, H]
            att = self._attend(out, memory)  # context [B, T, Dk]
            tilde = torch.tanh(self.readout(torch.cat([att.context, out], dim=-1)))  # [B, T, H]
            return self.drop(tilde), replace(state, hidden=hidden), att.weights
        hidden, feed, outputs, weights = state.hidden, state.feed, [], []
        for t in range(length):
            y = emb[:, t:t + 1]  # [B, 1, E]
            if cfg.arrangement == "bahdanau":
                att = self._attend(_top(hidden)[:, None, :], memory)  # s_{i-1} attends: context [B, 1, Dk]
                out, hidden = self.rnn(torch.cat([y, att.context], dim=-1), hidden)  # [B, 1, H]
                out = torch.tanh(self.readout(torch.cat([out, att.context, y], dim=-1)))  # [B, 1, H]
            else:  # Luong with input feeding
                out, hidden = self.rnn(torch.cat([y, feed[:, None, :]], dim=-1), hidden)  # [B, 1, H]
                att = self._attend(out, memory)
                out = torch.tanh(self.readout(torch.cat([att.context, out], dim=-1)))  # [B, 1, H]
                feed = out[:, 0]  # [B, H]
            outputs.append(out)
            weights.append(att.weights)  # [B, 1, S]
        out = torch.cat(outputs, dim=1)  # T x [B, 1, H] -> [B, T, H]
        return self.drop(out), replace(state, hidden=hidden, feed=feed), torch.cat(weights, dim=1)  # [B, T, S]

    def decode(self, memory: Seq2SeqMemory, ids: torch.Tensor, mask: torch.Tensor,
               need_weights: bool = False) -> DecoderOutput:
        """Teacher forcing: ids [B, T] (BOS first) -> DecoderOutput(tokens [B, T, H], attention
        {"attention": [B, T, S]} when need_weights and the model attends). `mask` is not read (module docstring)."""
        out, _, weights = self._run(ids, self.start(memory))
        attention = {"attention": weights} if need_weights and weights is not None else None
        return DecoderOutput(tokens=out, attention=attention)

    def step(self, ids: torch.Tensor, state: Seq2SeqState) -> tuple[torch.Tensor, Seq2SeqState]:
        """Read ids [B, T'] after `state`; -> (output state of the last position [B, H], new state)."""
        out, state, _ = self._run(ids, state)
        return out[:, -1], state

    def reorder(self, state: Seq2SeqState, indices: torch.Tensor) -> Seq2SeqState:
        """Rows `indices` [B'] of everything batched in the state (the memory included)."""
        m = state.memory

        def rows(x: torch.Tensor | None) -> torch.Tensor | None:
            return x.index_select(0, indices) if x is not None else None

        memory = Seq2SeqMemory(states=rows(m.states), mask=rows(m.mask), keys=rows(m.keys),
                               hidden=_rows(m.hidden, indices), context=rows(m.context))
        return Seq2SeqState(memory=memory, hidden=_rows(state.hidden, indices), feed=rows(state.feed))


# ------------------------------------------------------------------------------------------- presets

_NO_ATTENTION = {"attention": "none", "arrangement": "bahdanau", "input_feeding": False, "attention_size": 256}
PRESETS: dict[str, Preset] = {
    # For tests: two layers, a bidirectional encoder whose states match the decoder's size (so dot,
    # scaled_dot and cosine apply too), dropout on so train mode differs.
    "tiny": Preset(
        Seq2SeqConfig(cell="gru", embedding_dim=8, encoder_hidden=6, hidden_size=12, num_layers=2,
                      bidirectional=True, bridge=True, reverse_source=False, context_every_step=False,
                      attention="additive", arrangement="bahdanau", attention_size=8, input_feeding=False,
                      max_source_positions=24, dropout=0.1)),
    # The CPU presets below are sized for Multi30k (29,000 pairs, ~8k BPE types a side) to make several
    # passes over the data in about 45 minutes on 2 CPU threads; the papers' models are 4-8x wider.
    # Sutskever et al. (2014): stacked LSTMs (they use 4 x 1000), states copied, source reversed.
    "sutskever": Preset(
        Seq2SeqConfig(cell="lstm", embedding_dim=256, encoder_hidden=256, hidden_size=256, num_layers=2,
                      bidirectional=False, bridge=False, reverse_source=True, context_every_step=False,
                      **_NO_ATTENTION, max_source_positions=100, dropout=0.3)),
    # Cho et al. (2014): one GRU layer a side (1000 in the paper), the summary fed at every step.
    "cho": Preset(
        Seq2SeqConfig(cell="gru", embedding_dim=256, encoder_hidden=512, hidden_size=512, num_layers=1,
                      bidirectional=False, bridge=True, reverse_source=False, context_every_step=True,
                      **_NO_ATTENTION, max_source_positions=100, dropout=0.3)),
    # Bahdanau et al. (2015), RNNsearch at CPU size: bidirectional GRU encoder, additive attention with
    # the previous state.
    "bahdanau": Preset(
        Seq2SeqConfig(cell="gru", embedding_dim=256, encoder_hidden=256, hidden_size=512, num_layers=1,
                      bidirectional=True, bridge=True, reverse_source=False, context_every_step=False,
                      attention="additive", arrangement="bahdanau", attention_size=256, input_feeding=False,
                      max_source_positions=100, dropout=0.3)),
    # Luong et al. (2015): LSTM, the current state attends, input feeding. The score is cosine with a
    # learned gain rather than the paper's general (bilinear) one: at an equal budget of 800 steps the
    # general score, whose raw products of 512-wide states saturate the softmax, learned slowest of five
    # and cosine fastest (docs/RESULTS.md, the attention score functions). The encoder states (2 x 256)
    # match the decoder (512), so every score applies: model.attention=general gives the paper's.
    "luong": Preset(
        Seq2SeqConfig(cell="lstm", embedding_dim=256, encoder_hidden=256, hidden_size=512, num_layers=1,
                      bidirectional=True, bridge=True, reverse_source=False, context_every_step=False,
                      attention="cosine", arrangement="luong", attention_size=256, input_feeding=True,
                      max_source_positions=100, dropout=0.3)),
    # Bahdanau et al. (2015), appendix A.2: RNNsearch, embeddings 620, 1000 GRU units a direction and
    # in the decoder, alignment model of 1000.
    "paper": Preset(
        Seq2SeqConfig(cell="gru", embedding_dim=620, encoder_hidden=1000, hidden_size=1000, num_layers=1,
                      bidirectional=True, bridge=True, reverse_source=False, context_every_step=False,
                      attention="additive", arrangement="bahdanau", attention_size=1000, input_feeding=False,
                      max_source_positions=100, dropout=0.0)),
}
Seq2Seq.presets = PRESETS
