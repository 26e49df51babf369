"""Every public function rejects bad input with an error that names the argument.

``CASES`` is the single table of cases (the README counts them): an id, a call that must fail,
the exception type, and a regex the message must match, naming the argument and, where there
is one, its shape or value.
"""

from __future__ import annotations

import re

import pytest
import torch

from attnbook import costs
from attnbook.attention import attention, softmax
from attnbook.masks import causal_mask, padding_mask, segment_mask, sliding_window_mask
from attnbook.online_softmax import SoftmaxState, block_state, finalize, merge, tiled_attention
from attnbook.rope import apply_rope, rope_angles, rope_frequencies


def t(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


def shape(*dims):
    """Regex for a shape as the messages print it, e.g. ``(2, 3)``."""
    return re.escape(str(tuple(dims)))


Q, K, V = t(1, 4, 3, 8), t(1, 2, 5, 8), t(1, 2, 5, 6)  # a valid GQA triple
POS = torch.arange(3)
STATE = SoftmaxState(t(2), t(2), t(2, 4))
KV = {"layers": 2, "positions": 8, "kv_heads": 2, "head_dim": 4, "bytes_per_element": 2}

CASES = [
    # attention
    ("q-not-tensor", lambda: attention([[1.0]], K, V),
        TypeError, r"q must be a torch\.Tensor"),
    ("q-rank-1", lambda: attention(t(8), K, V),
        ValueError, rf"q must have rank >= 2.*{shape(8)}"),
    ("q-integer", lambda: attention(t(1, 4, 3, 8, dtype=torch.long), K, V),
        TypeError, r"q .*floating.*torch\.int64"),
    ("qkv-mixed-dtype", lambda: attention(Q, K.double(), V),
        TypeError, r"q, k and v must share a dtype.*float64"),
    ("qkv-rank-mismatch", lambda: attention(Q, K[0], V[0]),
        ValueError, rf"same rank.*k {shape(2, 5, 8)}"),
    ("qkv-batch-mismatch", lambda: attention(t(2, 4, 3, 8), K, V),
        ValueError, rf"batch dims.*q {shape(2, 4, 3, 8)}"),
    ("k-dk-mismatch", lambda: attention(Q, t(1, 2, 5, 7), V),
        ValueError, r"q has dk=8 but k has dk=7"),
    ("q-dk-zero", lambda: attention(t(1, 4, 3, 0), t(1, 2, 5, 0), V),
        ValueError, r"dk >= 1"),
    ("v-tk-mismatch", lambda: attention(Q, K, t(1, 2, 4, 6)),
        ValueError, r"k has Tk=5 tokens but v has 4"),
    ("kv-heads-mismatch", lambda: attention(Q, K, t(1, 1, 5, 6)),
        ValueError, r"k has 2 heads but v has 1"),
    ("heads-indivisible", lambda: attention(t(1, 3, 3, 8), K, V),
        ValueError, r"q has 3 heads but k has 2; heads must divide"),
    ("mask-float", lambda: attention(Q, K, V, t(3, 5)),
        TypeError, rf"mask must have .*bool.*{shape(3, 5)}"),
    ("mask-not-broadcastable", lambda: attention(Q, K, V, t(3, 4, dtype=torch.bool)),
        ValueError, rf"mask of shape {shape(3, 4)}.*{shape(1, 4, 3, 5)}"),
    ("mask-too-many-dims", lambda: attention(Q, K, V, t(2, 1, 4, 3, 5, dtype=torch.bool)),
        ValueError, rf"mask of shape {shape(2, 1, 4, 3, 5)}"),
    ("scale-bool", lambda: attention(Q, K, V, scale=True),
        TypeError, r"scale must be a real number"),
    ("scale-nan", lambda: attention(Q, K, V, scale=float("nan")),
        ValueError, r"scale must be finite"),
    ("softmax-not-tensor", lambda: softmax([1.0, 2.0]),
        TypeError, r"scores must be a torch\.Tensor"),
    ("softmax-integer", lambda: softmax(t(3, dtype=torch.long)),
        TypeError, r"scores must have .*floating"),
    # masks
    ("causal-t_q-zero", lambda: causal_mask(0),
        ValueError, r"t_q must be >= 1, got 0"),
    ("causal-t_k-negative", lambda: causal_mask(2, -1),
        ValueError, r"t_k must be >= 1, got -1"),
    ("causal-t_q-float", lambda: causal_mask(2.0),
        TypeError, r"t_q must be an int, got 2\.0"),
    ("causal-t_q-bool", lambda: causal_mask(True),
        TypeError, r"t_q must be an int, got True"),
    ("causal-offset-float", lambda: causal_mask(2, 3, offset=1.5),
        TypeError, r"offset must be an int, got 1\.5"),
    ("window-zero", lambda: sliding_window_mask(4, window=0),
        ValueError, r"window must be >= 1, got 0"),
    ("padding-length-too-long", lambda: padding_mask([3, 5], 4),
        ValueError, r"lengths must lie in \[0, t=4\], got \[3, 5\]"),
    ("padding-length-negative", lambda: padding_mask([-1], 4),
        ValueError, r"lengths .*\[-1\]"),
    ("padding-length-float", lambda: padding_mask(torch.tensor([1.0]), 4),
        TypeError, r"lengths must have .*integer.*torch\.float32"),
    ("padding-length-item-float", lambda: padding_mask([2, 1.5], 4),
        TypeError, r"lengths\[1\] must be an int, got 1\.5"),
    ("padding-lengths-not-sequence", lambda: padding_mask(3, 4),
        TypeError, r"lengths must be a 1-D tensor or a sequence"),
    ("padding-lengths-empty", lambda: padding_mask([], 4),
        ValueError, r"lengths is empty"),
    ("padding-lengths-rank-2", lambda: padding_mask(torch.tensor([[1, 2]]), 4),
        ValueError, rf"lengths must have rank 1.*{shape(1, 2)}"),
    ("padding-t-zero", lambda: padding_mask([0], 0),
        ValueError, r"t must be >= 1, got 0"),
    ("segment-rank-1", lambda: segment_mask(torch.zeros(3, dtype=torch.long)),
        ValueError, rf"segment_ids must have rank 2.*{shape(3)}"),
    ("segment-float", lambda: segment_mask(t(1, 3)),
        TypeError, r"segment_ids must have .*integer"),
    ("segment-empty", lambda: segment_mask(torch.zeros(0, 4, dtype=torch.long)),
        ValueError, rf"segment_ids must have B >= 1 and T >= 1.*{shape(0, 4)}"),
    # rope
    ("rope-odd-d", lambda: apply_rope(t(3, 5), POS),
        ValueError, rf"x must have an even feature width d.*{shape(3, 5)}"),
    ("rope-x-rank-1", lambda: apply_rope(t(4), POS),
        ValueError, rf"x must have rank >= 2.*{shape(4)}"),
    ("rope-x-integer", lambda: apply_rope(t(3, 4, dtype=torch.long), POS),
        TypeError, r"x must have .*floating"),
    ("rope-positions-float", lambda: apply_rope(t(3, 4), POS.float()),
        TypeError, r"positions must have .*integer.*torch\.float32"),
    ("rope-positions-list", lambda: apply_rope(t(3, 4), [0, 1, 2]),
        TypeError, r"positions must be a torch\.Tensor"),
    ("rope-positions-shape", lambda: apply_rope(t(3, 4), torch.arange(5)),
        ValueError, rf"positions of shape {shape(5)}.*{shape(3)}"),
    ("rope-layout", lambda: apply_rope(t(3, 4), POS, layout="neox"),
        ValueError, r"layout must be 'half' or 'interleaved', got 'neox'"),
    ("rope-base-zero", lambda: apply_rope(t(3, 4), POS, base=0.0),
        ValueError, r"base must be > 0, got 0\.0"),
    ("frequencies-d-zero", lambda: rope_frequencies(0),
        ValueError, r"d must be >= 1, got 0"),
    ("frequencies-d-odd", lambda: rope_frequencies(5),
        ValueError, r"d must be even.*d=5"),
    ("frequencies-base-str", lambda: rope_frequencies(4, base="1e4"),
        TypeError, r"base must be a real number"),
    ("angles-positions-float", lambda: rope_angles(POS.double(), 4),
        TypeError, r"positions must have .*integer"),
    # costs
    ("kv-layers-zero", lambda: costs.kv_cache_bytes(**{**KV, "layers": 0}),
        ValueError, r"layers must be >= 1, got 0"),
    ("kv-head_dim-float", lambda: costs.kv_cache_bytes(**{**KV, "head_dim": 1.5}),
        TypeError, r"head_dim must be an int, got 1\.5"),
    ("kv-bytes-bool", lambda: costs.kv_cache_bytes(**{**KV, "bytes_per_element": True}),
        TypeError, r"bytes_per_element must be an int, got True"),
    ("kv-value_dim-zero", lambda: costs.kv_cache_bytes(**KV, value_dim=0),
        ValueError, r"value_dim must be >= 1, got 0"),
    ("kv-batch-negative", lambda: costs.kv_cache_bytes(**KV, batch=-2),
        ValueError, r"batch must be >= 1, got -2"),
    ("attention-flops-n-negative", lambda: costs.attention_flops(-1, 4),
        ValueError, r"n must be >= 1, got -1"),
    ("projection-flops-d-str", lambda: costs.projection_flops(4, "4"),
        TypeError, r"d must be an int, got '4'"),
    ("ffn-hidden-zero", lambda: costs.ffn_flops(4, 4, 0),
        ValueError, r"hidden must be >= 1, got 0"),
    ("swiglu-multiple_of-zero", lambda: costs.swiglu_hidden(4096, multiple_of=0),
        ValueError, r"multiple_of must be >= 1, got 0"),
    ("block-d-zero", lambda: costs.block_params(0),
        ValueError, r"d must be >= 1, got 0"),
    ("training-params-float", lambda: costs.training_flops(1e9, 10),
        TypeError, r"params must be an int, got 1000000000\.0"),
    ("chinchilla-ratio-zero", lambda: costs.chinchilla_tokens(10, tokens_per_param=0),
        ValueError, r"tokens_per_param must be >= 1, got 0"),
    ("vit-height-indivisible", lambda: costs.vit_tokens(225, 224, 16),
        ValueError, r"height=225 is not a multiple of patch=16"),
    ("vit-width-indivisible", lambda: costs.vit_tokens(224, 200, 16),
        ValueError, r"width=200 is not a multiple of patch=16"),
    ("vit-patch-zero", lambda: costs.vit_tokens(224, 224, 0),
        ValueError, r"patch must be >= 1, got 0"),
    ("vit-channels-zero", lambda: costs.vit_tokens(224, 224, 16, channels=0),
        ValueError, r"channels must be >= 1, got 0"),
    # online softmax
    ("block-tb-mismatch", lambda: block_state(t(2, 3), t(4, 5)),
        ValueError, rf"scores .*values .*do not fit.*scores {shape(2, 3)}, values {shape(4, 5)}"),
    ("block-scores-rank-1", lambda: block_state(t(3), t(3, 5)),
        ValueError, rf"scores must have rank >= 2.*{shape(3)}"),
    ("block-mixed-dtype", lambda: block_state(t(2, 3), t(3, 5).double()),
        TypeError, r"scores and values must share a dtype"),
    ("merge-not-state", lambda: merge((t(2), t(2), t(2, 4)), STATE),
        TypeError, r"a must be a SoftmaxState, got tuple"),
    ("merge-shape-mismatch", lambda: merge(STATE, SoftmaxState(t(3), t(3), t(3, 4))),
        ValueError, rf"cannot merge.*a\.u {shape(2, 4)}, b\.u {shape(3, 4)}"),
    ("finalize-inconsistent", lambda: finalize(SoftmaxState(t(2), t(3), t(2, 4))),
        ValueError, rf"state has inconsistent shapes: m {shape(2)}, l {shape(3)}"),
    ("tiled-gqa", lambda: tiled_attention(Q, K, V),
        ValueError, r"q has 4 heads but k has 2; they must be equal"),
    ("tiled-block-zero", lambda: tiled_attention(Q, Q, Q, block_size=0),
        ValueError, r"block_size must be >= 1, got 0"),
    ("tiled-block-float", lambda: tiled_attention(Q, Q, Q, block_size=8.0),
        TypeError, r"block_size must be an int, got 8\.0"),
    ("tiled-k-dk-mismatch", lambda: tiled_attention(Q, t(1, 4, 5, 6), t(1, 4, 5, 6)),
        ValueError, r"q has dk=8 but k has dk=6"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "error", "match"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_bad_input_is_rejected_with_a_message_naming_it(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
