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
