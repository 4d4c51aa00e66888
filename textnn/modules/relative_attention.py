"""Relative multi-head attention with a segment memory (Transformer-XL; Dai et al. 2019, §3.2-3.3).

A query at absolute position i attends to keys at positions j <= i. The attention score of Dai et
al. (2019) eq. in §3.3 splits into four terms,

    A_ij = q_i·k_j  +  q_i·W_R R_{i-j}  +  u·k_j  +  v·W_R R_{i-j}
           (a) content  (b) position      (c) global content bias  (d) global position bias

where R_{i-j} is a fixed sinusoid encoding of the distance i - j (`modules.positions`; never of absolute positions, so
that hidden states computed for an earlier segment can be reused as they are), W_R projects it
into key space, and u, v are learned vectors, one per head, that replace the query in terms (c)
and (d) because the "query" of a global bias must not depend on the position. Grouped:

    A_ij = (q_i + u)·k_j  +  (q_i + v)·W_R R_{i-j}
             terms a + c        terms b + d

Terms a + c are an ordinary dot-product score, so they go to `F.scaled_dot_product_attention`
(DESIGN.md convention 8); terms b + d enter it as an additive float mask, computed for every
(query, distance) pair by one matmul and moved to (query, key) order by `rel_shift`.

Memory (§3.2): the keys and values also cover M hidden states of the previous segment(s),
prepended to the current T and cut from the graph (stop-gradient, SG(.) in the paper), so a query
sees K = M + T keys. Which keys it may see is a bool mask [T, K], True = may attend
(DESIGN.md convention 4), from `relative_causal_mask`.

Which of u, v belong to which layer is the caller's choice: this module takes them as arguments.
"""

# B batch, T query (segment) length, M memory length, K = M + T key length, D model dim,
# H heads, Dh head dim

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from textnn.modules.attention import merge_heads, split_heads


def relative_distances(key_len: int, clamp_len: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """Distances K-1, K-2, ..., 0 (float [K]): the order `rel_shift` expects.

    With `clamp_len` > 0 every distance above it is read as `clamp_len`, so a model evaluated with a
    memory longer than it was trained on never meets an encoding it has not seen (Dai et al.'s code,
    `clamp_len`; their WT103 evaluation clamps at 400 with a 640-token memory).
    """
    distances = torch.arange(key_len - 1, -1, -1, device=device, dtype=torch.float32)  # [K]
    return distances.clamp(max=clamp_len) if clamp_len > 0 else distances


def rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """Turn scores by (query, distance) into scores by (query, key): [..., T, K] -> [..., T, K].

    In: scores[..., i, c] belongs to query i and distance K-1-c (the order of `relative_distances`).
    Out: out[..., i, j] = scores[..., i, j + T-1-i], the score of query i (absolute position M+i)
    for key j, whose distance is M+i-j. Each row has to move left by T-1-i: a different shift per row.

    The trick (Dai et al. 2019, appendix B): pad one zero column in front ([T, K+1]), read the same
    memory as [K+1, T] and drop its first row, then read what is left as [T, K]. Flat element
    T + i*K + j of the padded buffer is i*(K+1) + (T+j-i): row i, column T+j-i, which holds
    scores[i, j+T-1-i] exactly while that column exists (j <= M+i, the keys a causal query may see).
    Entries with j > M+i (future keys) come from the next row: garbage that the causal mask hides.
    No gather, no loop: one padded copy and three views.
    """
    *lead, q_len, key_len = scores.shape
    padded = F.pad(scores, (1, 0))  # [..., T, K+1]
    padded = padded.view(*lead, key_len + 1, q_len)  # the same buffer read as [..., K+1, T]
    return padded[..., 1:, :].view(*lead, q_len, key_len)  # drop T numbers, read as [..., T, K]


def relative_causal_mask(q_len: int, mem_len: int, span: int = 0,
                         device: torch.device | None = None) -> torch.Tensor:
    """Which keys each query may attend to: bool [T, K] with K = M + T, True = may attend.

    Query i sits at absolute position M+i and sees key j when j <= M+i (itself, its segment's past
    and the memory). With `span` > 0 it also needs j > M+i-span: every query sees at most `span`
    keys, itself included, however far into the segment it is (Dai et al.'s `same_length`
    evaluation, which gives every predicted token the same attention length).
    """
    query_pos = torch.arange(q_len, device=device)[:, None] + mem_len  # [T, 1]
    key_pos = torch.arange(mem_len + q_len, device=device)[None, :]  # [1, K]
    allowed = key_pos <= query_pos  # [T, K]
    if span > 0:
        allowed &= key_pos > query_pos - span
    return allowed


class RelativeMultiHeadAttention(nn.Module):
    """Multi-head attention with relative position scores and a read-only memory (Dai et al. 2019, §3.3).

    forward(x [B, T, D], memory [B, M, D] or None, pos [K, D], content_bias u [H, Dh],
            position_bias v [H, Dh], allowed [T, K] bool) -> [B, T, D]

    `pos` holds the sinusoid encodings of distances K-1 .. 0 (`relative_distances` +
    `modules.positions.sinusoid_encoding`, dropout already applied by the caller). Projections have
    no bias, as in the authors' code: u and v are the only biases of the scores. The output is not
    dropped out here: the residual sub-layer around it does that (`modules.transformer.residual`).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, dropatt: float) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.dropatt = n_heads, d_head, dropatt
        inner = n_heads * d_head
        self.query = nn.Linear(d_model, inner, bias=False)  # queries only for the current segment
        self.key_value = nn.Linear(d_model, 2 * inner, bias=False)  # keys and values for memory + segment
        self.position = nn.Linear(d_model, inner, bias=False)  # W_R of §3.3
        self.out = nn.Linear(inner, d_model, bias=False)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, pos: torch.Tensor,
                content_bias: torch.Tensor, position_bias: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        heads, d_head = self.n_heads, self.d_head
        # SG(memory): the previous segment's states are context, never trained through (§3.2).
        context = x if memory is None else torch.cat([memory.detach(), x], dim=1)  # [B, K, D]
        q = split_heads(self.query(x), heads, d_head)  # [B, T, H*Dh] -> [B, H, T, Dh]
        k, v = self.key_value(context).chunk(2, dim=-1)  # [B, K, 2*H*Dh] -> 2 x [B, K, H*Dh]
        k, v = split_heads(k, heads, d_head), split_heads(v, heads, d_head)  # [B, H, K, Dh] each
        r = split_heads(self.position(pos)[None], heads, d_head)  # [1, K, H*Dh] -> [1, H, K, Dh]

        # Terms b + d for every (query, distance) pair in one matmul, then re-indexed by key.
        q_pos = q + position_bias[None, :, None, :]  # [B, H, T, Dh] + [1, H, 1, Dh]
        by_distance = torch.matmul(q_pos, r.transpose(-2, -1))  # [B, H, T, Dh] @ [1, H, Dh, K] -> [B, H, T, K]
        # SDPA adds the mask after scaling q·k by 1/sqrt(Dh); scale b + d the same way.
        bias = rel_shift(by_distance) * (1.0 / math.sqrt(d_head))  # [B, H, T, K]
        bias = bias.masked_fill(~allowed, float("-inf"))  # [T, K] broadcast over B, H

        q_content = q + content_bias[None, :, None, :]  # terms a + c: (q + u)·k
        attended = F.scaled_dot_product_attention(q_content, k, v, attn_mask=bias.to(q.dtype),
                                                  dropout_p=self.dropatt if self.training else 0.0)
        return self.out(merge_heads(attended))  # [B, H, T, Dh] -> [B, T, H*Dh] -> [B, T, D]
