"""attnbook: the small helper package behind *Attention and Transformers, executable*.

Shape legend (one source of truth; every docstring in the package uses these names)
----------------------------------------------------------------------------------
``B``    batch size
``H``    number of heads; ``Hq`` query heads and ``Hkv`` key/value heads when they differ
``T``    tokens (sequence length); ``Tq`` queries and ``Tk`` keys when they differ
``d``    model width (``d_model``)
``dk``   query/key features per head
``dv``   value features per head
``L``    number of layers

Conventions
-----------
* Tensors follow the layout of PyTorch's ``scaled_dot_product_attention``:
  ``(..., heads, tokens, features)``.
* Masks are ``torch.bool`` with ``True`` meaning *may attend* (SDPA's convention; note that
  ``nn.MultiheadAttention`` uses the opposite meaning for boolean masks). ``attention`` also
  takes a floating mask, which is added to the scores (ALiBi, Hugging Face's eager masks).
* A query row with no allowed key yields a zero output row and zero weights, never NaN.
* Public functions validate their inputs and raise ``ValueError``/``TypeError`` naming the
  offending argument and its shape or value.

Modules: ``attention``, ``heads``, ``masks``, ``rope``, ``costs``, ``online_softmax``,
``tiled_backward`` (a backward pass that recomputes scores block by block), ``memory``,
``plots``, ``widgets``, ``runtime``, ``practice`` (exercises whose checker names the reader's
mistake); the labs add ``retrieval`` (the task) with ``retrieval_model`` (its model and
training) and ``retrieval_seeds`` (several seeds trained as one batched model), and
``diagnostics`` (data and mask contracts) with ``training_health`` (activations, gradients,
memory, entropy). The tiny GPT of chapter 13 adds ``norm`` (RMSNorm), ``kv_cache``, ``gpt``
(the model and its parameter and FLOP counts), ``sampling``, ``corpus`` (the book's prose as
characters) and ``lm_training``; the induction-head chapter adds ``induction`` (the task and
the head scores) and ``induction_model``. Real models: ``configs`` (published configurations
as small JSON files, read into a ``GPTConfig``). Scale: ``io_complexity`` (slow-memory
traffic of standard and tiled attention) and ``data_parallel`` (chapter 13's loop under DDP).
Serving: ``decoding`` (split-KV decoding), ``rolling_cache`` (a sliding-window cache),
``paged_cache`` (block tables), ``linear_attention`` (three forms of causal linear attention)
and ``speculative`` (the acceptance rule, exactly and by sampling).
Nothing is imported eagerly here so that ``import attnbook`` stays cheap.
"""

__version__ = "0.1.0"

from attnbook.runtime import setup, training_seed

__all__ = ["__version__", "setup", "training_seed"]
