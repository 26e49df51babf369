"""Every public function rejects bad input with an error that names the argument.

``CASES`` is the single table of cases (the README counts them): an id, a call that must fail,
the exception type, and a regex the message must match, naming the argument and, where there
is one, its shape or value.
"""

from __future__ import annotations

import re

import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from attnbook import costs
from attnbook.attention import attention, softmax
from attnbook.diagnostics import (
    check_attention_rows,
    check_cache,
    check_causality,
    check_isolation,
    check_label_shift,
    check_loss_masking,
)
from attnbook.heads import merge_heads, split_heads
from attnbook.masks import causal_mask, padding_mask, segment_mask, sliding_window_mask
from attnbook.memory import peak_bytes
from attnbook.online_softmax import SoftmaxState, block_state, finalize, merge, tiled_attention
from attnbook.plots import heatmap, new_figure
from attnbook.retrieval import RetrievalConfig, RetrievalData, make_data
from attnbook.retrieval_model import (
    TinyRetriever,
    final_logits,
    intervention_accuracy,
    no_context_accuracy,
    score,
    train,
)
from attnbook.rope import apply_rope, rope_angles, rope_frequencies
from attnbook.runtime import setup
from attnbook.training_health import (
    attention_entropy,
    grad_norm,
    measure_memory,
    watch_activations,
)


def t(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


def shape(*dims):
    """Regex for a shape as the messages print it, e.g. ``(2, 3)``."""
    return re.escape(str(tuple(dims)))


Q, K, V = t(1, 4, 3, 8), t(1, 2, 5, 8), t(1, 2, 5, 6)  # a valid GQA triple
POS = torch.arange(3)
STATE = SoftmaxState(t(2), t(2), t(2, 4))
KV = {"layers": 2, "positions": 8, "kv_heads": 2, "head_dim": 4, "bytes_per_element": 2}
IDS = torch.zeros(2, 5, dtype=torch.long)  # (N, T) ids for the retrieval task
CONFIG = RetrievalConfig()
DATA = RetrievalData(IDS, IDS, torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long))
MODEL = TinyRetriever(CONFIG)
X = t(1, 3, 4)  # (B, T, d) input for the perturbation checks
NET = nn.Linear(4, 4)


def gen():
    return torch.Generator().manual_seed(0)


def axes():
    return Figure().add_subplot()


def mean_loss(logits, labels):
    return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def data(keys=IDS, values=IDS, answers=DATA.answers, evidence=DATA.evidence):
    return RetrievalData(keys, values, answers, evidence)


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
    # plots
    ("figure-nrows-zero", lambda: new_figure(0),
        ValueError, r"nrows must be >= 1, got 0"),
    ("figure-ncols-float", lambda: new_figure(1, 2.0),
        TypeError, r"ncols must be an int, got 2\.0"),
    ("figure-width-negative", lambda: new_figure(width=-1),
        ValueError, r"width must be > 0, got -1\.0"),
    ("figure-height-zero", lambda: new_figure(height=0),
        ValueError, r"height must be > 0, got 0\.0"),
    ("heatmap-ax-none", lambda: heatmap(None, t(2, 2)),
        TypeError, r"ax must be a matplotlib Axes, got NoneType"),
    ("heatmap-rank-1", lambda: heatmap(axes(), t(3)),
        ValueError, rf"matrix must be 2-D.*{shape(3)}"),
    ("heatmap-rank-3", lambda: heatmap(axes(), t(1, 2, 2)),
        ValueError, rf"matrix must be 2-D.*{shape(1, 2, 2)}"),
    ("heatmap-empty", lambda: heatmap(axes(), t(0, 3)),
        ValueError, rf"matrix must be 2-D \(rows, cols\) and non-empty.*{shape(0, 3)}"),
    ("heatmap-strings", lambda: heatmap(axes(), [["a", "b"]]),
        TypeError, r"matrix must hold numbers or bools, got dtype <U1"),
    ("heatmap-row-labels", lambda: heatmap(axes(), t(2, 3), row_labels=["a"]),
        ValueError, rf"row_labels has 1 labels for 2 rows of matrix {shape(2, 3)}"),
    ("heatmap-col-labels", lambda: heatmap(axes(), t(2, 3), col_labels="ab"),
        ValueError, rf"col_labels has 2 labels for 3 cols of matrix {shape(2, 3)}"),
    ("heatmap-vmin-above-vmax", lambda: heatmap(axes(), t(2, 2), vmin=1, vmax=0),
        ValueError, r"vmin must be < vmax, got vmin=1\.0, vmax=0\.0"),
    ("heatmap-vmax-str", lambda: heatmap(axes(), t(2, 2), vmax="1"),
        TypeError, r"vmax must be a real number, got '1'"),
    # runtime
    ("setup-seed-negative", lambda: setup(-1),
        ValueError, r"seed must be >= 0, got -1"),
    ("setup-seed-float", lambda: setup(1.5),
        TypeError, r"seed must be an int, got 1\.5"),
    ("setup-threads-zero", lambda: setup(0, threads=0),
        ValueError, r"threads must be >= 1, got 0"),
    ("setup-threads-bool", lambda: setup(0, threads=True),
        TypeError, r"threads must be an int, got True"),
    # memory
    ("peak-fn-not-callable", lambda: peak_bytes(42),
        TypeError, r"fn must be callable, got int"),
    # retrieval: the task and its data
    ("config-keys-zero", lambda: RetrievalConfig(keys=0),
        ValueError, r"keys must be >= 1, got 0"),
    ("config-heads-float", lambda: RetrievalConfig(heads=4.0),
        TypeError, r"heads must be an int, got 4\.0"),
    ("config-train_size-bool", lambda: RetrievalConfig(train_size=True),
        TypeError, r"train_size must be an int, got True"),
    ("config-batch-negative", lambda: RetrievalConfig(batch=-1),
        ValueError, r"batch must be >= 1, got -1"),
    ("config-steps-zero", lambda: RetrievalConfig(steps=0),
        ValueError, r"steps must be >= 1, got 0"),
    ("config-seed-negative", lambda: RetrievalConfig(seed=-1),
        ValueError, r"seed must be >= 0, got -1"),
    ("config-records-above-keys", lambda: RetrievalConfig(records=9),
        ValueError, r"records=9 needs 9 distinct keys but keys=8"),
    ("config-heads-indivisible", lambda: RetrievalConfig(heads=3),
        ValueError, r"width=32 is not a multiple of heads=3"),
    ("config-lr-zero", lambda: RetrievalConfig(lr=0),
        ValueError, r"lr must be > 0, got 0\.0"),
    ("config-lr-nan", lambda: RetrievalConfig(lr=float("nan")),
        ValueError, r"lr must be finite, got nan"),
    ("config-weight_decay-negative", lambda: RetrievalConfig(weight_decay=-0.1),
        ValueError, r"weight_decay must be >= 0, got -0\.1"),
    ("config-clip-zero", lambda: RetrievalConfig(clip=0.0),
        ValueError, r"clip must be > 0, got 0\.0"),
    ("make-data-count-zero", lambda: make_data(0, CONFIG, gen()),
        ValueError, r"count must be >= 1, got 0"),
    ("make-data-config-dict", lambda: make_data(4, {}, gen()),
        TypeError, r"config must be a RetrievalConfig, got dict"),
    ("make-data-generator-int", lambda: make_data(4, CONFIG, 0),
        TypeError, r"generator must be a Generator, got int"),
    ("make-data-records-above-keys", lambda: make_data(4, CONFIG, gen(), records=9),
        ValueError, r"records=9 needs 9 distinct keys but keys=8"),
    ("make-data-records-zero", lambda: make_data(4, CONFIG, gen(), records=0),
        ValueError, r"records must be >= 1, got 0"),
    ("make-data-records-float", lambda: make_data(4, CONFIG, gen(), records=2.0),
        TypeError, r"records must be an int, got 2\.0"),
    ("make-data-evidence-out-of-range", lambda: make_data(4, CONFIG, gen(), evidence=4),
        ValueError, r"evidence must lie in \[0, records=4\), got 4"),
    ("make-data-exclude-list", lambda: make_data(4, CONFIG, gen(), exclude=[]),
        TypeError, r"exclude must be a set of signatures or None, got list"),
    ("data-keys-float", lambda: data(keys=IDS.float()),
        TypeError, rf"keys must have .*integer.*torch\.float32 \(shape {shape(2, 5)}\)"),
    ("data-keys-rank-1", lambda: data(keys=IDS[0]),
        ValueError, rf"keys must have rank 2 \(N, T\), got shape {shape(5)}"),
    ("data-values-mismatch", lambda: data(values=IDS[:, :4]),
        ValueError, rf"keys {shape(2, 5)} and values {shape(2, 4)} differ"),
    ("data-answers-length", lambda: data(answers=torch.zeros(3, dtype=torch.long)),
        ValueError, rf"answers has shape {shape(3)} but keys has N=2"),
    ("data-evidence-rank-2", lambda: data(evidence=IDS),
        ValueError, rf"evidence must have rank 1 \(N,\), got shape {shape(2, 5)}"),
    ("data-empty-batch", lambda: data(IDS[:0], IDS[:0], DATA.answers[:0], DATA.evidence[:0]),
        ValueError, rf"keys must have N >= 1 and T >= 1, got shape {shape(0, 5)}"),
    # retrieval: the model, its training and evaluation
    ("retriever-config-dict", lambda: TinyRetriever({}),
        TypeError, r"config must be a RetrievalConfig, got dict"),
    ("retriever-keys-float", lambda: MODEL(IDS.float(), IDS),
        TypeError, r"keys must have .*integer.*torch\.float32"),
    ("retriever-values-rank-1", lambda: MODEL(IDS, IDS[0]),
        ValueError, rf"values must have rank 2 \(N, T\), got shape {shape(5)}"),
    ("retriever-shape-mismatch", lambda: MODEL(IDS, IDS[:, :4]),
        ValueError, rf"keys {shape(2, 5)} and values {shape(2, 4)} differ"),
    ("retriever-empty-batch", lambda: MODEL(IDS[:0], IDS[:0]),
        ValueError, rf"keys must have N >= 1 and T >= 1, got shape {shape(0, 5)}"),
    ("retriever-key-out-of-range", lambda: MODEL(IDS + 8, IDS),
        ValueError, r"keys must lie in \[0, 8\), got ids from 8 to 8"),
    ("retriever-value-negative", lambda: MODEL(IDS, IDS - 1),
        ValueError, r"values must lie in \[0, 9\), got ids from -1 to -1"),
    ("retriever-head_mask-shape", lambda: MODEL(IDS, IDS, head_mask=t(3)),
        ValueError, rf"head_mask has shape {shape(3)}; expected \(H,\) = \(4,\)"),
    ("retriever-head_mask-bool", lambda: MODEL(IDS, IDS, head_mask=t(4, dtype=torch.bool)),
        TypeError, r"head_mask must have .*floating.*torch\.bool"),
    ("final-logits-model-linear", lambda: final_logits(NET, DATA),
        TypeError, r"model must be a TinyRetriever, got Linear"),
    ("score-data-tuple", lambda: score(MODEL, (IDS, IDS)),
        TypeError, r"data must be a RetrievalData, got tuple"),
    ("no-context-data-dict", lambda: no_context_accuracy(MODEL, {}),
        TypeError, r"data must be a RetrievalData, got dict"),
    ("intervention-shift-multiple", lambda: intervention_accuracy(MODEL, DATA, shift=8),
        ValueError, r"shift=8 is a multiple of V=8"),
    ("intervention-shift-float", lambda: intervention_accuracy(MODEL, DATA, shift=1.5),
        TypeError, r"shift must be an int, got 1\.5"),
    ("train-config-dict", lambda: train({}, DATA),
        TypeError, r"config must be a RetrievalConfig, got dict"),
    ("train-data-tuple", lambda: train(CONFIG, (IDS, IDS)),
        TypeError, r"data must be a RetrievalData, got tuple"),
    # diagnostics: data and mask contracts
    ("label-shift-float", lambda: check_label_shift(IDS.float(), IDS),
        TypeError, rf"inputs must have .*integer.*torch\.float32 \(shape {shape(2, 5)}\)"),
    ("label-shift-rank-1", lambda: check_label_shift(IDS[0], IDS[0]),
        ValueError, rf"inputs must have rank 2 \(B, T\), got shape {shape(5)}"),
    ("label-shift-mismatch", lambda: check_label_shift(IDS, IDS[:, 1:]),
        ValueError, rf"inputs {shape(2, 5)} and labels {shape(2, 4)} differ"),
    ("label-shift-one-token", lambda: check_label_shift(IDS[:, :1], IDS[:, :1]),
        ValueError, rf"inputs must have B >= 1 and T >= 2, got shape {shape(2, 1)}"),
    ("label-shift-empty-batch", lambda: check_label_shift(IDS[:0], IDS[:0]),
        ValueError, rf"inputs must have B >= 1 and T >= 2, got shape {shape(0, 5)}"),
    ("label-shift-ignore-float", lambda: check_label_shift(IDS, IDS, ignore=-100.0),
        TypeError, r"ignore must be an int, got -100\.0"),
    ("loss-masking-fn-none", lambda: check_loss_masking(None, IDS, IDS == 0, 8),
        TypeError, r"loss_fn must be callable, got NoneType"),
    ("loss-masking-valid-float", lambda: check_loss_masking(mean_loss, IDS, IDS.float(), 8),
        TypeError, rf"valid must have .*bool.*torch\.float32 \(shape {shape(2, 5)}\)"),
    ("loss-masking-labels-float", lambda: check_loss_masking(mean_loss, IDS.float(), IDS == 0, 8),
        TypeError, r"labels must have .*integer.*torch\.float32"),
    ("loss-masking-mismatch", lambda: check_loss_masking(mean_loss, IDS, IDS[:, 1:] == 0, 8),
        ValueError, rf"labels {shape(2, 5)} and valid {shape(2, 4)} differ"),
    ("loss-masking-vocab-zero", lambda: check_loss_masking(mean_loss, IDS, IDS == 0, 0),
        ValueError, r"vocab must be >= 1, got 0"),
    ("loss-masking-atol-zero", lambda: check_loss_masking(mean_loss, IDS, IDS == 0, 8, atol=0),
        ValueError, r"atol must be > 0, got 0\.0"),
    ("loss-masking-nothing-valid", lambda: check_loss_masking(mean_loss, IDS, IDS != 0, 8),
        ValueError, rf"valid of shape {shape(2, 5)} has no True entry"),
    ("loss-masking-loss-per-token",
        lambda: check_loss_masking(lambda lg, lb: lg.sum(-1), IDS, IDS == 0, 8),
        ValueError, rf"loss_fn\(logits, labels\) must be a scalar tensor, got shape {shape(2, 5)}"),
    ("causality-fn-int", lambda: check_causality(3, X),
        TypeError, r"fn must be callable, got int"),
    ("causality-x-rank-2", lambda: check_causality(NET, X[0]),
        ValueError, rf"x must have rank 3 \(B, T, d\), got shape {shape(3, 4)}"),
    ("causality-x-integer", lambda: check_causality(NET, IDS[..., None]),
        TypeError, r"x must have .*floating.*torch\.int64"),
    ("causality-empty-batch", lambda: check_causality(NET, X[:0]),
        ValueError, rf"x must have B >= 1 and T >= 1 and d >= 1, got shape {shape(0, 3, 4)}"),
    ("causality-one-position", lambda: check_causality(NET, X[:, :1]),
        ValueError, rf"x needs T >= 2 positions.*{shape(1, 1, 4)}"),
    ("causality-atol-negative", lambda: check_causality(NET, X, atol=-1e-6),
        ValueError, r"atol must be > 0, got -1e-06"),
    ("causality-seed-negative", lambda: check_causality(NET, X, seed=-1),
        ValueError, r"seed must be >= 0, got -1"),
    ("causality-fn-output-shape", lambda: check_causality(lambda x: x.sum(1), X),
        ValueError, rf"fn\(x\) must return \(B, T, \.\.\.\) = {shape(1, 3)}, got {shape(1, 4)}"),
    ("isolation-ids-float", lambda: check_isolation(NET, X, t(1, 3)),
        TypeError, rf"segment_ids must have .*integer.*{shape(1, 3)}"),
    ("isolation-ids-shape", lambda: check_isolation(NET, X, IDS),
        ValueError, rf"segment_ids {shape(2, 5)} and x's \(B, T\) {shape(1, 3)} differ"),
    ("isolation-x-rank-4", lambda: check_isolation(NET, t(1, 1, 3, 4), IDS),
        ValueError, rf"x must have rank 3 \(B, T, d\), got shape {shape(1, 1, 3, 4)}"),
    ("rows-weights-rank-1", lambda: check_attention_rows(t(3), t(3, dtype=torch.bool)),
        ValueError, rf"weights must have rank >= 2 \(\.\.\., Tq, Tk\), got shape {shape(3)}"),
    ("rows-weights-integer", lambda: check_attention_rows(IDS, IDS == 0),
        TypeError, r"weights must have .*floating.*torch\.int64"),
    ("rows-allowed-float", lambda: check_attention_rows(t(2, 3, 5), t(3, 5)),
        TypeError, rf"allowed must have .*bool.*torch\.float32 \(shape {shape(3, 5)}\)"),
    ("rows-allowed-shape", lambda: check_attention_rows(t(2, 3, 5), t(3, 4, dtype=torch.bool)),
        ValueError, rf"allowed of shape {shape(3, 4)} does not broadcast to weights"),
    ("rows-weights-empty", lambda: check_attention_rows(t(2, 0, 5), t(0, 5, dtype=torch.bool)),
        ValueError, rf"weights must have Tq >= 1 and Tk >= 1, got shape {shape(2, 0, 5)}"),
    ("rows-atol-zero", lambda: check_attention_rows(t(3, 5), t(3, 5, dtype=torch.bool), atol=0),
        ValueError, r"atol must be > 0, got 0\.0"),
    ("cache-rank-2", lambda: check_cache(t(3, 8), t(3, 8)),
        ValueError, rf"full must have rank 3 \(B, T, V\), got shape {shape(3, 8)}"),
    ("cache-integer", lambda: check_cache(t(1, 3, 8), IDS[..., None]),
        TypeError, r"cached must have .*floating.*torch\.int64"),
    ("cache-mismatch", lambda: check_cache(t(1, 3, 8), t(1, 4, 8)),
        ValueError, rf"full {shape(1, 3, 8)} and cached {shape(1, 4, 8)} differ"),
    ("cache-empty", lambda: check_cache(t(1, 0, 8), t(1, 0, 8)),
        ValueError, rf"full must have B >= 1 and T >= 1 and V >= 1, got shape {shape(1, 0, 8)}"),
    ("cache-atol-nan", lambda: check_cache(t(1, 3, 8), t(1, 3, 8), atol=float("nan")),
        ValueError, r"atol must be finite, got nan"),
    # training health
    ("entropy-rank-0", lambda: attention_entropy(torch.tensor(0.5)),
        ValueError, r"weights must have rank >= 1 \(\.\.\., Tq, Tk\), got shape \(\)"),
    ("entropy-integer", lambda: attention_entropy(IDS),
        TypeError, rf"weights must have .*floating.*torch\.int64 \(shape {shape(2, 5)}\)"),
    ("watch-model-function", lambda: watch_activations(lambda x: x, X),
        TypeError, r"model must be a Module, got function"),
    ("watch-input-list", lambda: watch_activations(NET, [1.0, 2.0]),
        TypeError, r"inputs\[0\] must be a torch\.Tensor, got list"),
    ("grad-norm-model-dict", lambda: grad_norm({}),
        TypeError, r"model must be a Module, got dict"),
    ("memory-model-function", lambda: measure_memory(print, None, print),
        TypeError, r"model must be a Module, got builtin_function_or_method"),
    ("memory-optimizer-none", lambda: measure_memory(NET, None, lambda: NET(X).sum()),
        TypeError, r"optimizer must be an Optimizer, got NoneType"),
    ("memory-loss_fn-none",
        lambda: measure_memory(NET, torch.optim.SGD(NET.parameters()), None),
        TypeError, r"loss_fn must be callable, got NoneType"),
    ("memory-loss-not-scalar",
        lambda: measure_memory(NET, torch.optim.SGD(NET.parameters()), lambda: NET(X)),
        ValueError, rf"loss_fn\(\) must be a scalar tensor, got shape {shape(1, 3, 4)}"),
    # heads
    ("split-not-tensor", lambda: split_heads([[1.0]], 2),
        TypeError, r"x must be a torch\.Tensor"),
    ("split-rank-1", lambda: split_heads(t(8), 2),
        ValueError, rf"x must have rank >= 2.*{shape(8)}"),
    ("split-heads-zero", lambda: split_heads(t(3, 8), 0),
        ValueError, r"heads.*0"),
    ("split-heads-float", lambda: split_heads(t(3, 8), 2.0),
        TypeError, r"heads.*2\.0"),
    ("split-indivisible", lambda: split_heads(t(3, 8), 3),
        ValueError, rf"x has d=8 features \(shape {shape(3, 8)}\), which 3 heads"),
    ("merge-rank-2", lambda: merge_heads(t(3, 8)),
        ValueError, rf"x must have rank >= 3.*{shape(3, 8)}"),
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


def test_readme_states_the_number_of_cases():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    stated = re.search(r"\*\*(\d+) bad-input cases\*\*", readme)
    assert stated, "README no longer states how many bad-input cases there are"
    assert int(stated.group(1)) == len(CASES)
