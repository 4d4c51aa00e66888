"""Multi-head attention and the pre-LN block (modules/attention.py, modules/transformer.py).

Parity with torch.nn.MultiheadAttention on copied weights (self-attention, causal, key padding,
cross-attention); the key/value cache with several new tokens per call equals one full pass; the
explicit weights path equals the fused one; the pre-LN block's residual structure.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from textnn.errors import TextnnError
from textnn.modules.attention import MultiHeadAttention, attention_mask
from textnn.modules.transformer import TransformerBlock

D, H = 12, 3


def inputs(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, length, D, generator=torch.Generator().manual_seed(seed))


def pair(bias: bool = True, seed: int = 0) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """Our module and torch's, holding the same weights, in eval mode."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D, H, dropout=0.0, bias=bias).eval()
    theirs = nn.MultiheadAttention(D, H, bias=bias, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.in_proj.weight)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            theirs.in_proj_bias.copy_(ours.in_proj.bias)
            theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, theirs


def padding_mask(lengths: list[int], total: int) -> torch.Tensor:
    """[B, S] bool, True for the first `length` keys of each row."""
    return torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parity
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch_multihead_attention(bias):
    ours, theirs = pair(bias)
    x = inputs(2, 7)
    expected, _ = theirs(x, x, x, need_weights=False)
    torch.testing.assert_close(ours(x).output, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parity
def test_causal_and_padding_masks_match_torch_with_its_inverted_convention():
    ours, theirs = pair()
    x = inputs(3, 6, seed=1)
    keep = padding_mask([6, 4, 2], 6)  # ours: True = may attend
    blocked_future = ~torch.ones(6, 6, dtype=torch.bool).tril()  # torch: True = blocked
    expected, weights = theirs(x, x, x, key_padding_mask=~keep, attn_mask=blocked_future, average_attn_weights=False)
    out = ours(x, key_mask=keep, causal=True, need_weights=True)
    # Real query rows only (every row has its first key, so no row is fully masked).
    torch.testing.assert_close(out.output, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.weights, weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours(x, causal=True).output,
                               theirs(x, x, x, attn_mask=blocked_future, need_weights=False)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parity
def test_cross_attention_matches_torch():
    ours, theirs = pair()
    x, memory = inputs(2, 5, seed=2), inputs(2, 9, seed=3)
    keep = padding_mask([9, 3], 9)
    expected, _ = theirs(x, memory, memory, key_padding_mask=~keep, need_weights=False)
    torch.testing.assert_close(ours(x, memory, key_mask=keep).output, expected, rtol=1e-5, atol=1e-6)
    # The memory's keys/values are projected once; the cache then serves later queries.
    first = ours(x[:, :2], memory, key_mask=keep, use_cache=True)
    second = ours(x[:, 2:], memory, key_mask=keep, cache=first.cache)
    torch.testing.assert_close(torch.cat([first.output, second.output], 1), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunks", [[4, 3, 1, 2], [1, 1, 1, 7], [10]])
def test_cache_with_several_new_tokens_equals_one_causal_pass(chunks):
    attn = MultiHeadAttention(D, H).eval()
    x = inputs(2, sum(chunks), seed=4)
    full = attn(x, causal=True).output
    outputs, cache, start = [], None, 0
    for size in chunks:
        out = attn(x[:, start:start + size], causal=True, cache=cache, use_cache=True)
        assert out.cache.length == start + size
        outputs.append(out.output)
        cache, start = out.cache, start + size
    torch.testing.assert_close(torch.cat(outputs, dim=1), full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["plain", "causal", "padding", "cache", "cross"])
def test_explicit_weights_path_equals_the_fused_path(case):
    attn = MultiHeadAttention(D, H).eval()
    x, memory = inputs(2, 6, seed=5), inputs(2, 4, seed=6)
    kwargs = {"plain": {}, "causal": {"causal": True}, "padding": {"key_mask": padding_mask([6, 3], 6)},
              "cross": {"memory": memory, "key_mask": padding_mask([4, 1], 4)}}.get(case)
    if case == "cache":
        past = attn(x[:, :4], causal=True, use_cache=True).cache
        x, kwargs = x[:, 4:], {"causal": True, "cache": past}
    fused = attn(x, **kwargs)
    explicit = attn(x, need_weights=True, **kwargs)
    assert fused.weights is None
    torch.testing.assert_close(explicit.output, fused.output, rtol=1e-5, atol=1e-6)
    weights = explicit.weights
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    if case == "causal":
        assert weights.triu(1).abs().max() == 0
    if case == "padding":
        assert weights[1, :, :, 3:].abs().max() == 0  # the padded keys of row 1 get nothing


def test_attention_mask_offsets_the_causal_mask_by_the_cached_positions():
    mask = attention_mask(2, 5, past=3, causal=True)
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    combined = attention_mask(2, 5, past=3, causal=True, key_mask=padding_mask([5, 2], 5))
    assert combined.shape == (2, 1, 2, 5)
    assert combined[1, 0].tolist() == [[True, True, False, False, False]] * 2
    assert attention_mask(3, 3) is None


def test_dropout_on_attention_only_in_training():
    attn = MultiHeadAttention(D, H, dropout=0.5)
    x = inputs(2, 6)
    attn.train()
    assert not torch.allclose(attn(x).output, attn(x).output)
    attn.eval()
    torch.testing.assert_close(attn(x).output, attn(x).output, rtol=0, atol=0)


def test_bad_arguments_raise():
    with pytest.raises(TextnnError, match="multiple of n_heads"):
        MultiHeadAttention(10, 3)
    attn = MultiHeadAttention(D, H)
    with pytest.raises(TextnnError, match="causal"):
        attn(inputs(1, 2), inputs(1, 3), causal=True)
    with pytest.raises(TextnnError, match="key_mask"):
        attn(inputs(1, 2), key_mask=torch.ones(1, 3, dtype=torch.bool))


def test_pre_ln_block_is_the_residual_formula_and_the_identity_when_branches_are_zero():
    torch.manual_seed(0)
    block = TransformerBlock(D, H, 4 * D, dropout=0.0).eval()
    x = inputs(2, 5, seed=7)
    attn_out = block.attn(F.layer_norm(x, (D,), block.ln_attn.weight, block.ln_attn.bias), causal=True).output
    middle = x + attn_out
    hidden = F.gelu(F.linear(F.layer_norm(middle, (D,), block.ln_ff.weight, block.ln_ff.bias),
                             block.ff.fc.weight, block.ff.fc.bias), approximate="tanh")
    expected = middle + F.linear(hidden, block.ff.proj.weight, block.ff.proj.bias)
    torch.testing.assert_close(block(x, causal=True).hidden, expected, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # both branches write zeros: the residual stream passes through untouched
        for layer in (block.attn.out_proj, block.ff.proj):
            layer.weight.zero_()
            layer.bias.zero_()
    torch.testing.assert_close(block(x, causal=True).hidden, x, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------ score functions

from textnn.modules.attention import SCORES, Attended, DotAttention, make_attention  # noqa: E402

DQ, DK, DV, S = 6, 6, 5, 7


def score_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    query, keys, values = torch.randn(3, 4, DQ, generator=g), torch.randn(3, S, DK, generator=g), torch.randn(3, S, DV, generator=g)
    return query, keys, values, padding_mask([7, 3, 1], S)


@pytest.mark.parametrize("score", SCORES)
def test_every_score_function_gives_weights_over_the_real_keys_only(score):
    torch.manual_seed(0)
    attention = make_attention(score, DQ, DK, attention_size=8, max_positions=10)
    query, keys, values, mask = score_inputs()
    out = attention(query, keys, values, mask)
    assert isinstance(out, Attended)
    assert out.context.shape == (3, 4, DV) and out.weights.shape == (3, 4, S)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(3, 4))
    assert (out.weights[~mask[:, None, :].expand(-1, 4, -1)] == 0).all()  # masked keys get weight 0
    assert (out.weights[mask[:, None, :].expand(-1, 4, -1)] > 0).all()
    torch.testing.assert_close(out.context, out.weights @ values)
    # The prepared keys (computed once per source sentence) give the same result.
    again = attention.attend(query, attention.prepare(keys), values, mask)
    torch.testing.assert_close(again.weights, out.weights, rtol=0, atol=0)
    # A different query changes the weights (the score reads the query) ...
    assert not torch.allclose(attention(query + 1.0, keys, values, mask).weights[0], out.weights[0])
    # ... and only location attention ignores the keys.
    moved = attention(query, keys.flip(1) * 2.0, values, mask).weights
    assert torch.equal(moved, out.weights) == (score == "location")


def test_the_score_formulas():
    torch.manual_seed(0)
    query, keys, values, mask = score_inputs(1)
    full = torch.ones(3, S, dtype=torch.bool)

    def softmax_of(scores):
        return torch.softmax(scores, dim=-1)

    dot = make_attention("dot", DQ, DK, 8, 10)
    torch.testing.assert_close(dot(query, keys, values, full).weights, softmax_of(query @ keys.transpose(1, 2)))
    scaled = make_attention("scaled_dot", DQ, DK, 8, 10)
    torch.testing.assert_close(scaled(query, keys, values, full).weights,
                               softmax_of(query @ keys.transpose(1, 2) / DK ** 0.5))
    general = make_attention("general", DQ, DK, 8, 10)
    w = general.key_proj.weight  # [Dq, Dk]
    torch.testing.assert_close(general(query, keys, values, full).weights,
                               softmax_of(query @ w @ keys.transpose(1, 2)))
    additive = make_attention("additive", DQ, DK, 8, 10)
    hidden = torch.tanh(additive.query_proj(query)[:, :, None] + additive.key_proj(keys)[:, None])  # [B, Tq, S, A]
    torch.testing.assert_close(additive(query, keys, values, full).weights,
                               softmax_of(hidden @ additive.v.weight[0]))
    cosine = make_attention("cosine", DQ, DK, 8, 10)
    cos = F.cosine_similarity(query[:, :, None], keys[:, None], dim=-1)  # [B, Tq, S]
    torch.testing.assert_close(cosine(query, keys, values, full).weights, softmax_of(10.0 * cos))
    location = make_attention("location", DQ, DK, 8, 10)
    torch.testing.assert_close(location(query, keys, values, full).weights,
                               softmax_of(location.position_scores(query)[:, :, :S]))
    assert type(make_attention("concat", DQ, DK, 8, 10)) is type(additive)  # Luong's concat is v^T tanh(W q + U k)


def test_score_function_errors():
    with pytest.raises(TextnnError, match="one size"):
        make_attention("dot", 4, 6, 8, 10)
    with pytest.raises(TextnnError, match="unknown attention score"):
        make_attention("bilinear", 4, 4, 8, 10)
    query, keys, values, mask = score_inputs()
    with pytest.raises(TextnnError, match="max_source_positions = 5"):
        make_attention("location", DQ, DK, 8, 5)(query, keys, values, mask)


def test_multi_head_attention_with_one_head_and_identity_projections_is_scaled_dot_attention():
    """The two families agree where they meet: one head, projections the identity, no bias."""
    attn = MultiHeadAttention(DK, 1, bias=False).eval()
    with torch.no_grad():
        attn.in_proj.weight.copy_(torch.eye(DK).repeat(3, 1))  # [3D, D]: query, key and value rows
        attn.out_proj.weight.copy_(torch.eye(DK))
    query, keys, _, mask = score_inputs(2)
    single = DotAttention(scaled=True)(query, keys, keys, mask)
    multi = attn(query, keys, key_mask=mask, need_weights=True)
    torch.testing.assert_close(multi.output, single.context, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(multi.weights[:, 0], single.weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(attn(query, keys, key_mask=mask).output, single.context, rtol=1e-5, atol=1e-6)


def test_memory_cache_holds_the_projected_memory():
    attn = MultiHeadAttention(D, H).eval()
    x, memory = inputs(2, 3, seed=8), inputs(2, 5, seed=9)
    cache = attn.memory_cache(memory)
    assert cache.keys.shape == (2, H, 5, D // H)
    torch.testing.assert_close(attn(x, memory, cache=cache).output, attn(x, memory).output, rtol=0, atol=0)


def test_post_ln_block_normalises_each_residual_sum():
    """Vaswani et al. 2017, §3.1: LayerNorm(x + Sublayer(x)), with ReLU in the feed-forward network."""
    torch.manual_seed(0)
    block = TransformerBlock(D, H, 4 * D, dropout=0.0, norm_first=False, activation="relu").eval()
    x = inputs(2, 5, seed=10)
    middle = F.layer_norm(x + block.attn(x, causal=True).output, (D,), block.ln_attn.weight, block.ln_attn.bias)
    ff = F.linear(F.relu(F.linear(middle, block.ff.fc.weight, block.ff.fc.bias)), block.ff.proj.weight,
                  block.ff.proj.bias)
    expected = F.layer_norm(middle + ff, (D,), block.ln_ff.weight, block.ln_ff.bias)
    torch.testing.assert_close(block(x, causal=True).hidden, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_block_with_caches_equals_one_full_pass(norm_first):
    from textnn.modules.transformer import DecoderBlock

    block = DecoderBlock(D, H, 2 * D, norm_first=norm_first).eval()
    x, memory = inputs(2, 6, seed=11), inputs(2, 4, seed=12)
    keep = padding_mask([4, 2], 4)
    full = block(x, memory, keep, need_weights=True)
    memory_cache, self_cache, outputs = block.cross_attn.memory_cache(memory), None, []
    for t in range(6):
        out = block(x[:, t:t + 1], memory, keep, self_cache=self_cache, memory_cache=memory_cache, use_cache=True)
        self_cache = out.self_cache
        outputs.append(out.hidden)
    torch.testing.assert_close(torch.cat(outputs, dim=1), full.hidden, rtol=1e-5, atol=1e-6)
    assert full.weights.shape == (2, H, 6, 4) and (full.weights[1, :, :, 2:] == 0).all()
