"""Transformer blocks: the position-wise feed-forward network, the pre-LN and the post-LN self-attention block.

Pre-LN (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", §2.3: "Layer
normalization was moved to the input of each sub-block"; analysed by Xiong et al. 2020, "On Layer
Normalization in the Transformer Architecture"): each sub-block normalises its input and adds its
output to an untouched residual stream,

    x = x + Dropout(Attention(LN(x)))
    x = x + Dropout(FFN(LN(x)))          FFN(x) = W2 GELU(W1 x + b1) + b2,  W1: D -> F (F = 4D)

so the residual path from the embeddings to the output is the identity. A model built from these
blocks adds one final LayerNorm after the last block (GPT-2 does, §2.3).

Post-LN (Vaswani et al. 2017 §3.1, "LayerNorm(x + Sublayer(x))"; BERT, Devlin et al. 2019, keeps it)
normalises after each residual addition instead, so no final LayerNorm is needed:

    x = LN(x + Dropout(Attention(x)))
    x = LN(x + Dropout(FFN(x)))

GELU (Hendrycks & Gimpel 2016) is exact, x * Phi(x) with the erf ("none": BERT's released code), or
its tanh approximation ("tanh": GPT-2's released code); checkpoints must be run with the one they
were trained with.
"""

# B batch, T length, S key length, H heads, D model dim, F feed-forward dim

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from textnn.modules.attention import KVCache, MultiHeadAttention


class FeedForward(nn.Module):
    """Position-wise feed-forward network: Linear(D, F) -> GELU -> Linear(F, D) (Vaswani et al. 2017, §3.3)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = True, gelu: str = "tanh") -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU(approximate=gelu)  # "tanh" or "none" (exact, erf)
        self.proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T, D]."""
        return self.proj(self.act(self.fc(x)))


@dataclass
class BlockOutput:
    hidden: torch.Tensor  # [B, T, D]
    cache: KVCache | None = None  # the attention's key/value cache (use_cache)
    weights: torch.Tensor | None = None  # [B, H, T, S] attention probabilities (need_weights)


class TransformerBlock(nn.Module):
    """Pre-LN self-attention block: LN -> attention -> dropout -> residual, LN -> FFN -> dropout -> residual.

    `dropout` applies to the attention probabilities and to each sub-block's output before the residual
    addition (Vaswani et al. 2017, §5.4 "Residual Dropout").
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, bias: bool = True,
                 eps: float = 1e-5, gelu: str = "tanh") -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.ln_ff = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.ff = FeedForward(d_model, d_ff, bias=bias, gelu=gelu)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, causal: bool = False, key_mask: torch.Tensor | None = None,
                cache: KVCache | None = None, use_cache: bool = False, need_weights: bool = False) -> BlockOutput:
        """x [B, T, D] -> BlockOutput(hidden [B, T, D], ...); the arguments are MultiHeadAttention's."""
        att = self.attn(self.ln_attn(x), key_mask=key_mask, causal=causal, cache=cache, use_cache=use_cache,
                        need_weights=need_weights)
        x = x + self.drop(att.output)
        x = x + self.drop(self.ff(self.ln_ff(x)))
        return BlockOutput(hidden=x, cache=att.cache, weights=att.weights)


class PostLNTransformerBlock(nn.Module):
    """Post-LN self-attention block (Vaswani et al. 2017 §3.1; BERT): attention -> dropout -> residual -> LN,
    FFN -> dropout -> residual -> LN.

    `attention_dropout` applies to the attention probabilities, `dropout` to each sub-block's output
    before the residual addition (BERT's attention_probs_dropout_prob and hidden_dropout_prob).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, attention_dropout: float = 0.0,
                 eps: float = 1e-12, gelu: str = "none") -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=attention_dropout)
        self.ln_attn = nn.LayerNorm(d_model, eps=eps)
        self.ff = FeedForward(d_model, d_ff, gelu=gelu)
        self.ln_ff = nn.LayerNorm(d_model, eps=eps)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None, need_weights: bool = False) -> BlockOutput:
        """x [B, T, D] -> BlockOutput(hidden [B, T, D], weights [B, H, T, T] with need_weights)."""
        att = self.attn(x, key_mask=key_mask, need_weights=need_weights)
        x = self.ln_attn(x + self.drop(att.output))
        x = self.ln_ff(x + self.drop(self.ff(x)))
        return BlockOutput(hidden=x, weights=att.weights)
