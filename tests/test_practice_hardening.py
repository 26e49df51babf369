"""Three holes an independent learner found in the checker, each pinned by the submission
that found it: a correct backward rejected under ``no_grad``, float16 positions accepted by
the RoPE exercise, and a function that patches torch's comparisons to grade itself."""

from __future__ import annotations

import math

import torch

from attnbook import practice


def _backward(q, k, v, out, lse, d_out):  # by hand: no autograd needed
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.mT * scale - lse[..., None])
    d_s = p * (d_out @ v.mT - (d_out * out).sum(-1, keepdim=True))
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_out


def test_a_correct_backward_passes_whatever_the_readers_autograd_mode():
    assert practice.check("attention_backward", _backward)
    with torch.no_grad():
        assert practice.check("attention_backward", _backward)
    with torch.inference_mode():
        assert practice.check("attention_backward", _backward)

    def turns_grad_off(*args):
        torch.set_grad_enabled(False)
        return _backward(*args)

    practice.check("attention_backward", turns_grad_off)
    assert torch.is_grad_enabled(), "the reader's global mode is put back"


def test_rope_with_positions_cast_to_float16_fails():
    namespace = {"torch": torch}
    exec(practice.solution("apply_rope"), namespace)
    right = namespace["solution_apply_rope"]
    assert practice.check("apply_rope", right)
    assert not practice.check("apply_rope", lambda x, positions: right(x, positions.half()))


def test_a_function_that_patches_torchs_comparisons_cannot_pass():
    originals = torch.equal, torch.isclose, torch.allclose

    def cheat(q, k, v, mask=None):
        torch.equal = lambda *a, **kw: True
        torch.allclose = lambda *a, **kw: True
        torch.isclose = lambda a, b, **kw: torch.ones(a.shape, dtype=torch.bool)
        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)

    try:
        assert not practice.check("attention", cheat)
        assert (torch.equal, torch.isclose, torch.allclose) == originals, "put back"
    finally:
        torch.equal, torch.isclose, torch.allclose = originals
