"""The Transformer encoder-decoder for translation (Vaswani et al. 2017, "Attention Is All You Need").

Source: embedding x sqrt(d_model) + sinusoid positions -> dropout -> N encoder layers (self-attention
over the source, feed-forward). Target: the same embedding and positions -> N decoder layers (causal
self-attention, attention over the encoder's output, feed-forward) -> the states the output layer reads.

- Layers and sub-layers (§3.1, Figure 1): each sub-layer is residual; post-LN as in the paper,
  LayerNorm(x + Sublayer(x)) (`pre_ln=false`, the default), or pre-LN, x + Sublayer(LayerNorm(x)),
  with a final LayerNorm after each stack (Xiong et al. 2020, "On Layer Normalization in the
  Transformer Architecture": trains without the warmup the post-LN model needs). Blocks from
  modules/transformer.py, attention from modules/attention.py.
- Multi-head scaled dot-product attention (§3.2), ReLU feed-forward of size d_ff (§3.3, eq. 2).
- Embeddings multiplied by sqrt(d_model) and one weight matrix for the source embedding, the target
  embedding and the pre-softmax linear layer (§3.4) when both sides share one vocabulary (joint BPE):
  `share_embeddings`; `tie_output` alone shares the target embedding with the output layer (Press &
  Wolf 2017). The output layer has no bias (`lm_bias = False`): logits = h E^T.
- Sinusoid positions (§3.5), sin(pos / 10000^(2i/d)) and cos(...) (`modules.positions.
  sinusoid_positions`, which puts all sines before all cosines: a fixed permutation of the dimensions,
  which the learned embeddings absorb); any length, so `max_length` is 0.
- Dropout (§5.4) on the sums of embeddings and positions, on each sub-layer's output before the
  residual addition, and on the attention probabilities.
- Initialisation: the paper gives none; as fairseq's Transformer (Ott et al. 2019), Xavier-uniform
  projections with zero biases and N(0, d_model^-1/2) embeddings (so embeddings x sqrt(d) have unit
  variance), an untied output layer N(0, d_model^-1/2) too.

Decoding (`start` / `step` / `reorder`): `start` projects the encoder output into each decoder layer's
cross-attention keys and values once per source sentence; `step` keeps each layer's self-attention
keys and values (a KV cache), so a new token costs one position's work, not a pass over the prefix.
"""

# B batch, S source length, T target length (T' new tokens of a step), D model dim (d_model),
# H heads, Dh head dim, F feed-forward dim, L layers, V vocabulary size, B' rows kept by reorder

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from textnn.config import ModelOptions, Preset, check_model_field as _check, opt
from textnn.errors import TextnnError
from textnn.models.base import (DecoderOutput, EncoderDecoder, Head, InputSpec, LayerGroups, require_bools,
                                require_choice, require_ints, require_probabilities)
from textnn.modules.attention import KVCache
from textnn.modules.dropout import Dropout
from textnn.modules.embeddings import TokenEmbedding
from textnn.modules.init import init_normal
from textnn.modules.positions import sinusoid_positions
from textnn.modules.transformer import ACTIVATIONS, DecoderBlock, TransformerBlock


@dataclass
class TransformerMTConfig(ModelOptions):
    n_layers: int = opt(6, "layers N in the encoder and in the decoder (Vaswani et al. 2017, §3.1)")
    n_heads: int = opt(8, "attention heads h per attention; must divide d_model")
    d_model: int = opt(512, "model size d_model: embeddings and every layer's states; even (sinusoids)")
    d_ff: int = opt(2048, "inner size d_ff of the position-wise feed-forward networks (§3.3)")
    dropout: float = opt(0.1, "dropout P_drop on embeddings + positions, sub-layer outputs and attention "
                              "probabilities (§5.4)", retunable=True)
    activation: str = opt("relu", f"feed-forward activation: {' or '.join(ACTIVATIONS)} (the paper: relu)")
    pre_ln: bool = opt(False, "LayerNorm at each sub-layer's input plus a final one per stack (pre-LN, Xiong et "
                              "al. 2020); false: LayerNorm(x + Sublayer(x)) as in the paper (post-LN)")
    share_embeddings: bool = opt(False, "one matrix for the source embedding, the target embedding and the output "
                                        "layer (§3.4); needs one vocabulary for both sides (joint BPE)")
    tie_output: bool = opt(True, "the output layer shares the target embedding matrix (§3.4; Press & Wolf 2017)")

    def __post_init__(self) -> None:
        require_ints(self, "n_layers", "n_heads", "d_model", "d_ff")
        _check(self.d_model % 2 == 0, "d_model", self.d_model, "an even integer (sinusoids pair a sine with a cosine)")
        _check(self.d_model % self.n_heads == 0, "d_model", self.d_model, f"a multiple of model.n_heads = {self.n_heads}")
        require_probabilities(self, "dropout", expected="a number in [0, 1)")
        require_choice(self, "activation", ACTIVATIONS)
        require_bools(self, "pre_ln", "share_embeddings", "tie_output")
        _check(self.tie_output or not self.share_embeddings, "tie_output", False,
               "true with model.share_embeddings=true (one matrix for all three)")


@dataclass
class TransformerMemory:
    """What `encode` gives the decoder."""

    states: torch.Tensor  # [B, S, D] the encoder's output
    mask: torch.Tensor  # [B, S] bool, True = real source token


@dataclass
class TransformerMTState:
    """What `step` carries: the memory, its projection per decoder layer, and the self-attention cache."""

    memory: TransformerMemory
    memory_caches: list[KVCache]  # per decoder layer: the memory's keys/values [B, H, S, Dh], from `start`
    self_caches: list[KVCache] | None  # per decoder layer: keys/values of the target read so far; None = nothing read
    offset: int  # number of target positions read so far (the position of the next one)


def _same_vocabulary(source: InputSpec, target: InputSpec) -> bool:
    """Whether two specs describe one vocabulary: the same spec object, or the same size and padding
    without pretrained vectors (the translation task passes one spec for a joint vocabulary)."""
    if source is target:
        return True
    return (source.vocab_size, source.pad_id) == (target.vocab_size, target.pad_id) \
        and source.pretrained is None and target.pretrained is None


def _rows(cache: KVCache, indices: torch.Tensor) -> KVCache:
    """Rows `indices` [B'] of a cache: keys/values [B, H, S, Dh] -> [B', H, S, Dh]."""
    return KVCache(keys=cache.keys.index_select(0, indices), values=cache.values.index_select(0, indices))


class TransformerMT(EncoderDecoder):
    """Transformer encoder-decoder; see the module docstring."""

    config_class = TransformerMTConfig
    lm_bias = False  # §3.4: the pre-softmax linear transformation is the (shared) embedding matrix

    def __init__(self, cfg: TransformerMTConfig, source: InputSpec, target: InputSpec) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        if cfg.share_embeddings and not _same_vocabulary(source, target):
            raise TextnnError(f"model.share_embeddings=true needs one vocabulary for source and target (a joint "
                              f"BPE), got {source.vocab_size} and {target.vocab_size} tokens; use a joint "
                              f"vocabulary or set model.share_embeddings=false")
        self.src_embedding = TokenEmbedding(source.vocab_size, d, source.pad_id)  # N(0, 1/d), padding row 0
        # Shared: the one module under both names (its parameters counted, grouped and saved once).
        self.tgt_embedding = self.src_embedding if cfg.share_embeddings \
            else TokenEmbedding(target.vocab_size, d, target.pad_id)
        common = dict(d_model=d, n_heads=cfg.n_heads, d_ff=cfg.d_ff, dropout=cfg.dropout, norm_first=cfg.pre_ln,
                      activation=cfg.activation)
        self.encoder_layers = nn.ModuleList(TransformerBlock(**common) for _ in range(cfg.n_layers))
        self.decoder_layers = nn.ModuleList(DecoderBlock(**common) for _ in range(cfg.n_layers))
        # Pre-LN leaves the residual stream unnormalised: each stack ends with a LayerNorm.
        self.encoder_norm = nn.LayerNorm(d) if cfg.pre_ln else None
        self.decoder_norm = nn.LayerNorm(d) if cfg.pre_ln else None
        self.drop = Dropout(cfg.dropout)
        self.token_size = d
        self._init_weights()

    def _init_weights(self) -> None:
        for layer in [*self.encoder_layers, *self.decoder_layers]:
            for module in layer.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

    def init_head(self, head: Head) -> None:
        """An untied output layer gets N(0, d_model^-1/2) weights, as the embeddings (fairseq)."""
        init_normal(head.modules(), self.cfg.d_model ** -0.5, skip=self.parameters())

    def output_embedding(self) -> nn.Parameter | None:
        return self.tgt_embedding.weight if self.cfg.tie_output else None  # [V, D]

    def layer_groups(self) -> LayerGroups:
        """The embeddings, then the encoder's layers, then the decoder's (each stack's final LayerNorm
        with its last layer)."""
        embeddings = [self.src_embedding] if self.cfg.share_embeddings else [self.src_embedding, self.tgt_embedding]
        groups: LayerGroups = [("embedding", embeddings)]
        for side, layers, norm in (("encoder", self.encoder_layers, self.encoder_norm),
                                   ("decoder", self.decoder_layers, self.decoder_norm)):
            for index, layer in enumerate(layers):
                last = index == len(layers) - 1 and norm is not None
                groups.append((f"{side}{index + 1}", [layer, norm] if last else [layer]))
        return groups

    # ----------------------------------------------------------------------------------------------
    def _embed(self, embedding: nn.Embedding, ids: torch.Tensor, offset: int) -> torch.Tensor:
        """Embeddings x sqrt(D) (§3.4) + sinusoids of positions offset .. offset + T - 1 (§3.5), dropped out."""
        pos = sinusoid_positions(offset, ids.size(1), self.cfg.d_model, ids.device)  # [T, D]
        x = embedding(ids) * math.sqrt(self.cfg.d_model) + pos.to(embedding.weight.dtype)  # [B, T, D]
        return self.drop(x)

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> TransformerMemory:
        """src_ids [B, S], src_mask [B, S] -> TransformerMemory(states [B, S, D], mask)."""
        x = self._embed(self.src_embedding, src_ids, 0)  # [B, S, D]
        for layer in self.encoder_layers:
            x = layer(x, key_mask=src_mask).hidden
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return TransformerMemory(states=x, mask=src_mask)

    def decode(self, memory: TransformerMemory, ids: torch.Tensor, mask: torch.Tensor,
               need_weights: bool = False) -> DecoderOutput:
        """Teacher forcing: ids [B, T] (BOS first) -> DecoderOutput(tokens [B, T, D], attention {"layer1":
        [B, H, T, S], ...} with need_weights). `mask` is not read: self-attention is causal, so a real
        position never sees the padding after it."""
        y = self._embed(self.tgt_embedding, ids, 0)  # [B, T, D]
        attention = {}
        for index, layer in enumerate(self.decoder_layers):
            out = layer(y, memory.states, memory.mask, need_weights=need_weights)
            y = out.hidden
            if need_weights:
                attention[f"layer{index + 1}"] = out.weights  # [B, H, T, S]
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return DecoderOutput(tokens=y, attention=attention or None)

    def start(self, memory: TransformerMemory) -> TransformerMTState:
        """The decoding state before the first target token; the memory's keys and values are projected here, once."""
        caches = [layer.cross_attn.memory_cache(memory.states) for layer in self.decoder_layers]
        return TransformerMTState(memory=memory, memory_caches=caches, self_caches=None, offset=0)

    def step(self, ids: torch.Tensor, state: TransformerMTState) -> tuple[torch.Tensor, TransformerMTState]:
        """Read ids [B, T'] at positions offset .. offset + T' - 1; -> (states of the last one [B, D], new state)."""
        y = self._embed(self.tgt_embedding, ids, state.offset)  # [B, T', D]
        memory, caches = state.memory, []
        for index, layer in enumerate(self.decoder_layers):
            out = layer(y, memory.states, memory.mask,
                        self_cache=state.self_caches[index] if state.self_caches is not None else None,
                        memory_cache=state.memory_caches[index], use_cache=True)
            y = out.hidden
            caches.append(out.self_cache)
        last = y[:, -1]  # [B, D]: only the last position is needed
        if self.decoder_norm is not None:
            last = self.decoder_norm(last)
        return last, TransformerMTState(memory=memory, memory_caches=state.memory_caches, self_caches=caches,
                                        offset=state.offset + ids.size(1))

    def reorder(self, state: TransformerMTState, indices: torch.Tensor) -> TransformerMTState:
        """Rows `indices` [B'] of the memory and of every cache."""
        memory = TransformerMemory(states=state.memory.states.index_select(0, indices),
                                   mask=state.memory.mask.index_select(0, indices))
        selves = [_rows(c, indices) for c in state.self_caches] if state.self_caches is not None else None
        return TransformerMTState(memory=memory, memory_caches=[_rows(c, indices) for c in state.memory_caches],
                                  self_caches=selves, offset=state.offset)


# ------------------------------------------------------------------------------------------- presets

PRESETS: dict[str, Preset] = {
    # For tests: two layers a side so the stacks are exercised, dropout on so train mode differs;
    # separate embeddings so it builds for separate vocabularies too.
    "tiny": Preset(
        TransformerMTConfig(n_layers=2, n_heads=2, d_model=16, d_ff=32, dropout=0.1, activation="relu",
                            pre_ln=False, share_embeddings=False, tie_output=True)),
    # CPU size for Multi30k under a joint BPE: the model of bentrevett's pytorch-seq2seq Transformer
    # tutorial (3 layers, d_model 256, 8 heads, d_ff 512, dropout 0.1; 36.5 BLEU on the 2016 test set),
    # with the paper's shared embeddings.
    "small": Preset(
        TransformerMTConfig(n_layers=3, n_heads=8, d_model=256, d_ff=512, dropout=0.1, activation="relu",
                            pre_ln=False, share_embeddings=True, tie_output=True)),
    # The base model (Vaswani et al. 2017, Table 3 "base": N 6, d_model 512, d_ff 2048, h 8, P_drop 0.1;
    # shared source/target/output embeddings under a joint BPE, §3.4 and §5.1).
    "base": Preset(
        TransformerMTConfig(n_layers=6, n_heads=8, d_model=512, d_ff=2048, dropout=0.1, activation="relu",
                            pre_ln=False, share_embeddings=True, tie_output=True)),
}
PRESETS["paper"] = PRESETS["base"]  # every family's "paper" preset: here the base model
TransformerMT.presets = PRESETS
