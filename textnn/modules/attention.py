"""Attention: the single-head score functions of the RNN encoder-decoders, and multi-head scaled
dot-product attention on `F.scaled_dot_product_attention` with a key/value cache.

1. Score functions (one interface, `Attention`): a query attends over S keys,

       weights = softmax_s(score(q, k_s)) over the real keys only,   context = sum_s weights_s v_s

   forward(query [B, Tq, Dq], keys [B, S, Dk], values [B, S, Dv], key_mask [B, S]) -> Attended(context
   [B, Tq, Dv], weights [B, Tq, S]). The scores (the names `make_attention` takes):

       additive    v^T tanh(W q + U k)           Bahdanau, Cho & Bengio (2015), §3.1 eq. 6 and appendix A.1.2
       concat      v^T tanh(W_a [q; k])          Luong, Pham & Manning (2015), §3.1 eq. 8: the same function
                                                 (W_a [q; k] = W q + U k), so the same class
       dot         q^T k                         Luong et al. (2015), eq. 8
       general     q^T W k   (bilinear)          Luong et al. (2015), eq. 8
       scaled_dot  q^T k / sqrt(Dk)              Vaswani et al. (2017), §3.2.1 eq. 1
       cosine      g cos(q, k), g learned        content addressing by cosine similarity (Graves et al. 2014,
                                                 "Neural Turing Machines", §3.3.1 eq. 5, whose key strength
                                                 beta is the learned g; Liu et al. 2022, Swin V2 §3.2)
       location    (W_a q)_s                     Luong et al. (2015), §3.1 eq. 9: from the query alone, one
                                                 learned score per source position; the keys are not read

   The keys' side of a score (U k, W k, k / |k|) does not depend on the query, so a decoder that
   attends once per target step computes it once per source sentence: `prepare(keys)` then
   `attend(query, prepared, values, key_mask)`; `forward` is the two in a row.

2. Multi-head attention (`MultiHeadAttention`). Vaswani et al. (2017), §3.2.1-3.2.2: softmax(Q K^T /
sqrt(Dh)) V in each of H heads of size Dh = D / H, the heads concatenated and projected back to D.
The projections of Q, K and V live in one [3D, D] matrix (`in_proj`), laid out as
torch.nn.MultiheadAttention's `in_proj_weight` (rows [query | key | value]), so one matmul serves
self-attention and weights copy across directly; cross-attention (a decoder reading an encoder's
memory) uses the query rows on the query input and the key/value rows on the memory.

Masks follow the one convention of the toolkit: bool, True = may attend (the opposite of
torch.nn.MultiheadAttention's masks, which mark what is *blocked*). Every multi-head attention mask
is built by `attention_mask` below.

Decoding with a cache: `cache` holds the keys and values of the S positions already read; the T new
queries attend to those plus themselves. With T = 1 no mask is needed (the newest token may see every
key); with T > 1 the causal mask is offset by S (query i sits at absolute position S + i). For
cross-attention `memory_cache` projects the memory's keys and values once per source sentence.

Fast path: `F.scaled_dot_product_attention` (fused kernels; `is_causal` for the plain full-sequence
causal case). `need_weights=True` computes the same numbers explicitly and also returns the
attention probabilities, for visualisation only (DESIGN.md convention 8).
"""

# B batch, T (Tq) query length (new tokens), S key length (cached + new, or memory length),
# H heads, Dh head dim, D model dim, Dq / Dk / Dv query, key and value sizes, A attention size

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from textnn.errors import TextnnError
from textnn.modules.dropout import dropout


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


def split_heads(x: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """Read the last dimension as H heads of Dh: [B, L, H*Dh] -> [B, H, L, Dh] (a view, no copy)."""
    batch, length, _ = x.shape
    return x.view(batch, length, n_heads, head_dim).transpose(1, 2)  # [B, L, H, Dh] -> [B, H, L, Dh]


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Put the heads side by side again: [B, H, L, Dh] -> [B, L, H*Dh]."""
    batch, n_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_heads * head_dim)  # [B, L, H, Dh] -> [B, L, H*Dh]


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
        return split_heads(x, self.n_heads, self.head_dim)  # [B, L, D] -> [B, H, L, Dh]

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
        weight_q = self.in_proj.weight[:d]  # [D, D]: the query rows
        bias_q = self.in_proj.bias[:d] if self.in_proj.bias is not None else None
        q = self._split_heads(F.linear(query, weight_q, bias_q))  # [B, H, T, Dh]
        if cache is not None:  # the memory's keys/values were projected at the first call
            return q, cache.keys, cache.values
        cache = self.memory_cache(memory)
        return q, cache.keys, cache.values

    def memory_cache(self, memory: torch.Tensor) -> KVCache:
        """The keys and values of a memory [B, S, D], projected once: pass the result as `cache` with the
        same memory at every later call (a decoder's cross-attention, once per source sentence)."""
        d = self.d_model
        weight_kv = self.in_proj.weight[d:]  # [2D, D]: the key and value rows
        bias_kv = self.in_proj.bias[d:] if self.in_proj.bias is not None else None
        k, v = F.linear(memory, weight_kv, bias_kv).split(d, dim=-1)  # [B, S, 2D] -> 2 x [B, S, D]
        return KVCache(self._split_heads(k), self._split_heads(v))

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
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            if fused_causal:
                mask = attention_mask(queries, keys, past, True, None, device=query.device)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # [B, H, T, S]
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # [B, H, T, S]
            out = dropout(weights, dropout_p, self.training) @ v  # [B, H, T, Dh]
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                 is_causal=fused_causal)  # [B, H, T, Dh]
        out = merge_heads(out)  # [B, H, T, Dh] -> [B, T, D]
        return AttentionOutput(output=self.out_proj(out), cache=KVCache(k, v) if use_cache else None,
                               weights=weights)


# ---------------------------------------------------------------------------------------------------
# Single-head score functions (module docstring, part 1)


@dataclass
class Attended:
    """What an `Attention` returns."""

    context: torch.Tensor  # [B, Tq, Dv] the weighted sums of the values
    weights: torch.Tensor  # [B, Tq, S] attention probabilities; rows sum to 1, masked keys get 0


class Attention(nn.Module):
    """Base of the score functions: subclasses define `prepare` (the keys' side, optional) and `score`."""

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        """What `score` reads of the keys [B, S, Dk]; computed once per source sentence. Default: the keys."""
        return keys

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        """Scores [B, Tq, S] of the queries [B, Tq, Dq] against the prepared keys."""
        raise NotImplementedError

    def attend(self, query: torch.Tensor, prepared: torch.Tensor, values: torch.Tensor,
               key_mask: torch.Tensor) -> Attended:
        """Attention with keys already `prepare`d; values [B, S, Dv], key_mask [B, S] bool (True = real)."""
        if key_mask.dtype != torch.bool:
            raise TypeError(f"masks are bool tensors (True = may attend), got dtype {key_mask.dtype}")
        scores = self.score(query, prepared)  # [B, Tq, S]
        scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))  # [B, S] -> [B, 1, S]
        # A row with no real key at all (an empty source) would be softmax(-inf...) = NaN; its weights
        # are set to 0 instead, so its context is 0 rather than poisoning the batch.
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # [B, Tq, S]
        return Attended(context=weights @ values, weights=weights)  # [B, Tq, S] @ [B, S, Dv] -> [B, Tq, Dv]

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                key_mask: torch.Tensor) -> Attended:
        return self.attend(query, self.prepare(keys), values, key_mask)


class AdditiveAttention(Attention):
    """score(q, k) = v^T tanh(W q + U k) (Bahdanau et al. 2015, eq. 6; Luong et al.'s "concat").
    U k is the prepared side, as Bahdanau et al. note in appendix A.1.2 ("U_a h_j does not depend on i,
    we can pre-compute it")."""

    def __init__(self, query_size: int, key_size: int, attention_size: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_size, attention_size, bias=False)  # W
        self.key_proj = nn.Linear(key_size, attention_size, bias=True)  # U (its bias is the one of W q + U k)
        self.v = nn.Linear(attention_size, 1, bias=False)

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # [B, S, A]

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.query_proj(query)[:, :, None, :] + prepared[:, None, :, :])  # [B, Tq, S, A]
        return self.v(hidden).squeeze(-1)  # [B, Tq, S, 1] -> [B, Tq, S]


class DotAttention(Attention):
    """score(q, k) = q^T k (Luong et al. 2015, eq. 8 "dot"); scaled by 1 / sqrt(Dk) with `scaled`
    (Vaswani et al. 2017, eq. 1: large dot products push the softmax into regions of tiny gradients)."""

    def __init__(self, scaled: bool = False) -> None:
        super().__init__()
        self.scaled = scaled

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        if query.size(-1) != prepared.size(-1):
            raise ValueError(f"dot attention needs queries and keys of one size, got {query.size(-1)} "
                             f"and {prepared.size(-1)}")
        scores = query @ prepared.transpose(1, 2)  # [B, Tq, D] @ [B, D, S] -> [B, Tq, S]
        return scores / math.sqrt(query.size(-1)) if self.scaled else scores


class GeneralAttention(Attention):
    """score(q, k) = q^T W k, bilinear (Luong et al. 2015, eq. 8 "general"); W k is the prepared side."""

    def __init__(self, query_size: int, key_size: int) -> None:
        super().__init__()
        self.key_proj = nn.Linear(key_size, query_size, bias=False)  # W: Dk -> Dq

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # [B, S, Dq]

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return query @ prepared.transpose(1, 2)  # [B, Tq, Dq] @ [B, Dq, S] -> [B, Tq, S]


class CosineAttention(Attention):
    """score(q, k) = g cos(q, k) with a learned gain g > 0.

    Cosines lie in [-1, 1], so softmax over them alone stays close to uniform; the learned gain sharpens
    it (the key strength beta of Graves et al. 2014, §3.3.1 eq. 5). It is kept as log g, starting at
    g = 10 and capped at 100, as Swin V2's scaled cosine attention does (Liu et al. 2022, §3.2).
    """

    def __init__(self, initial_gain: float = 10.0, max_gain: float = 100.0) -> None:
        super().__init__()
        self.log_gain = nn.Parameter(torch.tensor(math.log(initial_gain)))
        self.max_log_gain = math.log(max_gain)

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        return F.normalize(keys, dim=-1)  # [B, S, D] unit vectors

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        if query.size(-1) != prepared.size(-1):
            raise ValueError(f"cosine attention needs queries and keys of one size, got {query.size(-1)} "
                             f"and {prepared.size(-1)}")
        cosines = F.normalize(query, dim=-1) @ prepared.transpose(1, 2)  # [B, Tq, S]
        return cosines * self.log_gain.clamp(max=self.max_log_gain).exp()


class LocationAttention(Attention):
    """score_s = (W_a q)_s: weights from the query alone (Luong et al. 2015, §3.1 eq. 9), one learned
    score per source position, for sources of at most `max_positions` tokens; the keys are not read."""

    def __init__(self, query_size: int, max_positions: int) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.position_scores = nn.Linear(query_size, max_positions)  # W_a

    def score(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        length = prepared.size(1)
        if length > self.max_positions:
            raise TextnnError(f"location attention scores at most model.max_source_positions = "
                              f"{self.max_positions} source positions, got a source of {length} tokens; "
                              f"raise it or drop longer sentences")
        return self.position_scores(query)[:, :, :length]  # [B, Tq, P] -> [B, Tq, S]


SCORES = ("additive", "concat", "dot", "general", "scaled_dot", "cosine", "location")


def make_attention(score: str, query_size: int, key_size: int, attention_size: int,
                   max_positions: int) -> Attention:
    """The score function named `score` (one of SCORES) for queries of `query_size` and keys of `key_size`.

    attention_size: A of additive/concat; max_positions: source positions of location. The others
    ignore them. dot, scaled_dot and cosine need query_size == key_size.
    """
    if score not in SCORES:
        raise TextnnError(f"unknown attention score {score!r}; valid: {', '.join(SCORES)}")
    if score in ("dot", "scaled_dot", "cosine") and query_size != key_size:
        raise TextnnError(f"{score} attention compares queries and keys directly, so they need one size; got "
                          f"queries of {query_size} and keys of {key_size} (use general or additive, or "
                          f"make the sizes equal)")
    if score in ("additive", "concat"):
        return AdditiveAttention(query_size, key_size, attention_size)
    if score in ("dot", "scaled_dot"):
        return DotAttention(scaled=score == "scaled_dot")
    if score == "general":
        return GeneralAttention(query_size, key_size)
    if score == "cosine":
        return CosineAttention()
    return LocationAttention(query_size, max_positions)
