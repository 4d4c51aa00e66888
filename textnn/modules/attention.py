"""Multi-head scaled dot-product attention on `F.scaled_dot_product_attention`, with a key/value cache.

Vaswani et al. (2017), "Attention Is All You Need", §3.2.1-3.2.2: softmax(Q K^T / sqrt(Dh)) V in each
of H heads of size Dh = D / H, the heads concatenated and projected back to D. The projections of
Q, K and V live in one [3D, D] matrix (`in_proj`), laid out as torch.nn.MultiheadAttention's
`in_proj_weight` (rows [query | key | value]), so one matmul serves self-attention and weights copy
across directly; cross-attention (a decoder reading an encoder's memory) uses the query rows on the
query input and the key/value rows on the memory.

Masks follow the one convention of the toolkit: bool, True = may attend (the opposite of
torch.nn.MultiheadAttention's masks, which mark what is *blocked*). Every attention mask is built
by `attention_mask` below.

Decoding with a cache: `cache` holds the keys and values of the S positions already read; the T new
queries attend to those plus themselves. With T = 1 no mask is needed (the newest token may see every
key); with T > 1 the causal mask is offset by S (query i sits at absolute position S + i).

Fast path: `F.scaled_dot_product_attention` (fused kernels; `is_causal` for the plain full-sequence
causal case). `need_weights=True` computes the same numbers explicitly and also returns the
attention probabilities, for visualisation only (DESIGN.md convention 8).
"""

# B batch, T query length (new tokens), S key length (cached + new, or memory length),
# H heads, Dh head dim, D model dim

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from textnn.errors import TextnnError


@dataclass
class KVCache:
    """Keys and values of the positions read so far: self-attention appends to it at every call;
    for cross-attention it holds the projected memory, computed once and reused."""

    keys: torch.Tensor  # [B, H, S, Dh]
    values: torch.Tensor  # [B, H, S, Dh]

    @property
    def length(self) -> int:
        """Number of cached positions S."""
        return self.keys.size(2)


@dataclass
class AttentionOutput:
    output: torch.Tensor  # [B, T, D]
    cache: KVCache | None = None  # with use_cache: the keys/values including the new positions
    weights: torch.Tensor | None = None  # [B, H, T, S] with need_weights: attention probabilities


def attention_mask(queries: int, keys: int, past: int = 0, causal: bool = False,
                   key_mask: torch.Tensor | None = None, device: torch.device | None = None) -> torch.Tensor | None:
    """The bool mask (True = may attend) of `queries` queries over `keys` keys, or None when all may attend.

    causal: query i (at absolute position past + i) sees keys 0 .. past + i.
    key_mask: [B, S] bool, False for keys never to attend to (padding).
    Returns [T, S] (causal only) or [B, 1, T, S] (with a key mask), broadcastable over heads.
    """
    mask = None
    if causal:
        rows = torch.arange(queries, device=device)[:, None] + past  # [T, 1] absolute query positions
        mask = torch.arange(keys, device=device)[None, :] <= rows  # [T, S]
    if key_mask is not None:
        if key_mask.dtype != torch.bool:
            raise TypeError(f"masks are bool tensors (True = may attend), got dtype {key_mask.dtype}")
        padding = key_mask[:, None, None, :]  # [B, S] -> [B, 1, 1, S]
        mask = padding if mask is None else padding & mask  # [B, 1, T, S]
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head attention: `forward(query, memory=None, ...)`; self-attention when `memory` is None."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if n_heads < 1 or d_model % n_heads:
            raise TextnnError(f"attention: d_model = {d_model} must be a multiple of n_heads = {n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # rows [query | key | value]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # [B, L, D] -> [B, H, L, Dh]

    def _project(self, query: torch.Tensor, memory: torch.Tensor | None,
                 cache: KVCache | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries [B, H, T, Dh] and the keys/values [B, H, S, Dh] they attend over."""
        d = self.d_model
        if memory is None:  # self-attention: one matmul for all three
            q, k, v = self.in_proj(query).split(d, dim=-1)  # [B, T, 3D] -> 3 x [B, T, D]
            k, v = self._split_heads(k), self._split_heads(v)
            if cache is not None:
                k = torch.cat([cache.keys, k], dim=2)  # [B, H, S_past + T, Dh]
                v = torch.cat([cache.values, v], dim=2)
            return self._split_heads(q), k, v
        weight_q, weight_kv = self.in_proj.weight.split([d, 2 * d])  # [D, D], [2D, D]
        bias_q, bias_kv = self.in_proj.bias.split([d, 2 * d]) if self.in_proj.bias is not None else (None, None)
        q = self._split_heads(F.linear(query, weight_q, bias_q))  # [B, H, T, Dh]
        if cache is not None:  # the memory's keys/values were projected at the first call
            return q, cache.keys, cache.values
        k, v = F.linear(memory, weight_kv, bias_kv).split(d, dim=-1)  # [B, S, 2D] -> 2 x [B, S, D]
        return q, self._split_heads(k), self._split_heads(v)

    def forward(self, query: torch.Tensor, memory: torch.Tensor | None = None,
                key_mask: torch.Tensor | None = None, causal: bool = False, cache: KVCache | None = None,
                use_cache: bool = False, need_weights: bool = False) -> AttentionOutput:
        """Attend from `query` [B, T, D] to itself (memory None) or to `memory` [B, S, D].

        key_mask: [B, S] bool over the keys (cached ones included), True = may attend.
        causal: self-attention only; each position sees itself and the positions before it.
        cache: keys/values of earlier positions (self-attention) or of the memory (cross-attention).
        use_cache: return the cache to pass to the next call. need_weights: also return the
        attention probabilities [B, H, T, S], computed explicitly (same output as the fused path).
        """
        if causal and memory is not None:
            raise TextnnError("attention: a causal mask applies to self-attention, not to attention over a memory")
        batch, queries, _ = query.shape
        past = cache.length if cache is not None and memory is None else 0
        q, k, v = self._project(query, memory, cache)
        keys = k.size(2)
        if key_mask is not None and key_mask.shape != (batch, keys):
            raise TextnnError(f"attention: key_mask must be [B, S] = {(batch, keys)}, got {tuple(key_mask.shape)}")
        # The plain causal case (no cache, no padding) lets SDPA pick its causal kernel; one new query
        # after a cache may see every key, so it needs no mask at all.
        fused_causal = causal and key_mask is None and past == 0 and queries == keys
        mask = None
        if not fused_causal:
            mask = attention_mask(queries, keys, past, causal and queries > 1, key_mask, device=query.device)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            if fused_causal:
                mask = attention_mask(queries, keys, past, True, None, device=query.device)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # [B, H, T, S]
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # [B, H, T, S]
            out = F.dropout(weights, dropout, self.training) @ v  # [B, H, T, Dh]
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                 is_causal=fused_causal)  # [B, H, T, Dh]
        out = out.transpose(1, 2).reshape(batch, queries, self.d_model)  # [B, H, T, Dh] -> [B, T, D]
        return AttentionOutput(output=self.out_proj(out), cache=KVCache(k, v) if use_cache else None,
                               weights=weights)
