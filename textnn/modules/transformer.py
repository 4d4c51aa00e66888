"""Transformer blocks: the position-wise feed-forward network, the self-attention block and the
decoder block (self-attention, attention over the encoder's memory, feed-forward), pre- or post-LN.

Post-LN is the original Transformer (Vaswani et al. 2017, §3.1: "the output of each sub-layer is
LayerNorm(x + Sublayer(x))", with dropout on the sub-layer's output before the addition, §5.4):

    x = LN(x + Dropout(Sublayer(x)))

Pre-LN (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", §2.3: "Layer
normalization was moved to the input of each sub-block"; analysed by Xiong et al. 2020, "On Layer
Normalization in the Transformer Architecture"): each sub-block normalises its input and adds its
output to an untouched residual stream,

    x = x + Dropout(Attention(LN(x)))
    x = x + Dropout(FFN(LN(x)))          FFN(x) = W2 GELU(W1 x + b1) + b2,  W1: D -> F (F = 4D)

so the residual path from the embeddings to the output is the identity. A pre-LN stack adds one
final LayerNorm after its last block (GPT-2 does, §2.3); a post-LN one (the Transformer, BERT)
needs none (its last sub-layer ends with a LayerNorm).

The feed-forward activation (`ACTIVATIONS`): the original Transformer's ReLU (Vaswani et al. 2017,
§3.3 eq. 2), GELU (Hendrycks & Gimpel 2016) exact, x * Phi(x) with the erf (BERT's released code),
or its tanh approximation (GPT-2's released code). A checkpoint must run with the one it was trained with.
"""

# B batch, T length, S key length, H heads, D model dim, F feed-forward dim

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from textnn.modules.attention import KVCache, MultiHeadAttention
from textnn.modules.dropout import Dropout


ACTIVATIONS = ("gelu_tanh", "gelu", "relu")  # GELU's tanh approximation, exact (erf) GELU, ReLU


def residual(x: torch.Tensor, norm: nn.LayerNorm, branch: Callable[[torch.Tensor], torch.Tensor],
             drop: Dropout, norm_first: bool) -> torch.Tensor:
    """One sub-layer with its residual connection: x + Dropout(branch(LN(x))) when `norm_first`
    (pre-LN), else LN(x + Dropout(branch(x))) (post-LN, Vaswani et al. 2017 §3.1). [B, T, D] -> [B, T, D]."""
    if norm_first:
        return x + drop(branch(norm(x)))
    return norm(x + drop(branch(x)))


class FeedForward(nn.Module):
    """Position-wise feed-forward network: Linear(D, F) -> GELU or ReLU -> dropout -> Linear(F, D)
    (Vaswani et al. 2017, §3.3).

    `dropout` on the inner activations is Transformer-XL's (the authors' PositionwiseFF); the others
    leave it at 0, where it is the identity. The dropout on the output belongs to the residual
    sub-layer around it (`residual`).
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = True, activation: str = "gelu_tanh",
                 dropout: float = 0.0) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        self.fc = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.ReLU() if activation == "relu" else nn.GELU(approximate="tanh" if activation == "gelu_tanh" else "none")
        self.drop = Dropout(dropout)
        self.proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T, D]."""
        return self.proj(self.drop(self.act(self.fc(x))))


@dataclass
class BlockOutput:
    hidden: torch.Tensor  # [B, T, D]
    cache: KVCache | None = None  # the attention's key/value cache (use_cache)
    weights: torch.Tensor | None = None  # [B, H, T, S] attention probabilities (need_weights)


class TransformerBlock(nn.Module):
    """Self-attention block. Pre-LN (default): LN -> attention -> dropout -> residual, LN -> FFN ->
    dropout -> residual; post-LN (`norm_first=False`): each residual sum is normalised instead (`residual`).

    `dropout` applies to each sub-block's output before the residual addition (Vaswani et al. 2017,
    §5.4 "Residual Dropout") and to the attention probabilities, unless `attention_dropout` is given
    for those (BERT's attention_probs_dropout_prob beside its hidden_dropout_prob).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, bias: bool = True,
                 eps: float = 1e-5, norm_first: bool = True, activation: str = "gelu_tanh",
                 attention_dropout: float | None = None) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.attn = MultiHeadAttention(d_model, n_heads, bias=bias,
                                       dropout=dropout if attention_dropout is None else attention_dropout)
        self.ln_ff = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.ff = FeedForward(d_model, d_ff, bias=bias, activation=activation)
        self.drop = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, causal: bool = False, key_mask: torch.Tensor | None = None,
                cache: KVCache | None = None, use_cache: bool = False, need_weights: bool = False) -> BlockOutput:
        """x [B, T, D] -> BlockOutput(hidden [B, T, D], ...); the arguments are MultiHeadAttention's."""
        state = {}

        def attend(h: torch.Tensor) -> torch.Tensor:  # keeps the cache and weights `residual` does not return
            state["att"] = self.attn(h, key_mask=key_mask, causal=causal, cache=cache, use_cache=use_cache,
                                     need_weights=need_weights)
            return state["att"].output

        x = residual(x, self.ln_attn, attend, self.drop, self.norm_first)
        x = residual(x, self.ln_ff, self.ff, self.drop, self.norm_first)
        return BlockOutput(hidden=x, cache=state["att"].cache, weights=state["att"].weights)


@dataclass
class DecoderBlockOutput:
    hidden: torch.Tensor  # [B, T, D]
    self_cache: KVCache | None = None  # the self-attention's keys/values, the new positions included (use_cache)
    weights: torch.Tensor | None = None  # [B, H, T, S] attention over the memory (need_weights)


class DecoderBlock(nn.Module):
    """Transformer decoder layer (Vaswani et al. 2017, §3.1 "Decoder"): causal self-attention, attention
    over the encoder's memory (queries from the decoder, keys and values from the memory), and the
    feed-forward network, each a residual sub-layer, pre- or post-LN (`residual`)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, bias: bool = True,
                 eps: float = 1e-5, norm_first: bool = True, activation: str = "gelu_tanh") -> None:
        super().__init__()
        self.ln_self = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.ln_cross = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.ln_ff = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.ff = FeedForward(d_model, d_ff, bias=bias, activation=activation)
        self.drop = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                self_cache: KVCache | None = None, memory_cache: KVCache | None = None, use_cache: bool = False,
                need_weights: bool = False) -> DecoderBlockOutput:
        """x [B, T, D] (the T new target positions), memory [B, S, D], memory_mask [B, S] (True = real).

        self_cache: keys/values of the target positions before these; memory_cache: the memory's
        projected keys/values (`MultiHeadAttention.memory_cache`), so they are not projected again.
        """
        state = {}

        def self_attend(h: torch.Tensor) -> torch.Tensor:
            out = self.self_attn(h, causal=True, cache=self_cache, use_cache=use_cache)
            state["cache"] = out.cache
            return out.output

        def cross_attend(h: torch.Tensor) -> torch.Tensor:
            out = self.cross_attn(h, memory, key_mask=memory_mask, cache=memory_cache, need_weights=need_weights)
            state["weights"] = out.weights
            return out.output

        x = residual(x, self.ln_self, self_attend, self.drop, self.norm_first)
        x = residual(x, self.ln_cross, cross_attend, self.drop, self.norm_first)
        x = residual(x, self.ln_ff, self.ff, self.drop, self.norm_first)
        return DecoderBlockOutput(hidden=x, self_cache=state["cache"], weights=state["weights"])
