"""The frozen corpus: shipped as package data, plain text, read back exactly; the character
vocabulary, the training windows and the count baselines against hand computations."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import tomllib
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook.corpus import CharVocab, book_text, count_cross_entropy, random_windows
from attnbook.diagnostics import check_label_shift

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "attnbook" / "data" / "book_text.txt"


def test_the_corpus_file_is_plain_text_and_is_what_the_loader_reads():
    raw = DATA.read_bytes()
    text = raw.decode("utf-8")  # raises if it is not UTF-8
    assert "\x00" not in text and "\r" not in text
    assert all(ch.isprintable() or ch == "\n" for ch in text)
    assert book_text() == text
    assert len(text) > 100_000 and text.startswith("(ch-deriving)=\n# Deriving self-attention")
    assert "```{code-cell}" not in text  # prose only, no code cells


def test_the_corpus_ships_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["attnbook"]
    assert any(Path("data/book_text.txt").match(p) for p in patterns)


def test_vocabulary_round_trips_and_rejects_unknown_characters():
    vocab = CharVocab("hello world\n")
    assert len(vocab) == 9 and vocab.chars[0] == "\n"
    ids = vocab.encode("low hold")
    assert ids.dtype == torch.long and vocab.decode(ids) == "low hold"
    with pytest.raises(ValueError, match="outside the vocabulary: \\['a', 'y', 'z'\\]"):
        vocab.encode("lazy")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 9\)"):
        vocab.decode(torch.tensor([9]))
    with pytest.raises(ValueError, match="non-empty str"):
        CharVocab("")


def test_windows_are_slices_of_the_stream_with_labels_shifted_once():
    stream = torch.arange(100)
    inputs, labels = random_windows(stream, 8, 16, torch.Generator().manual_seed(0))
    assert inputs.shape == labels.shape == (8, 16)
    assert check_label_shift(inputs, labels).passed
    assert torch.equal(inputs[:, 1:] - inputs[:, :-1], torch.ones(8, 15, dtype=torch.long))
    with pytest.raises(ValueError, match="ids must hold >= 17 ids"):
        random_windows(torch.arange(16), 1, 16, torch.Generator())


def test_count_baselines_by_hand():
    train = torch.tensor([0, 1, 0, 1, 0, 1, 0, 2])  # counts 4, 3, 1; +1 each: 5/11, 4/11, 2/11
    test = torch.tensor([0, 1, 2, 0])
    expected = -(2 * math.log(5 / 11) + math.log(4 / 11) + math.log(2 / 11)) / 4
    assert math.isclose(count_cross_entropy(train, test, 3, order=0), expected, rel_tol=1e-12)
    # bigram rows (+1 smoothing): after 0 -> {0: 1, 1: 4, 2: 2} / 7;
    # after 1 -> {0: 4, 1: 1, 2: 1} / 6; after 2 -> uniform 1/3. Test pairs: 0->1, 1->2, 2->0.
    expected = -(math.log(4 / 7) + math.log(1 / 6) + math.log(1 / 3)) / 3
    assert math.isclose(count_cross_entropy(train, test, 3, order=1), expected, rel_tol=1e-12)
    # trigram: after (0, 1) -> {0: 3} of 3, so 2 gets (0 + 1) / (3 + 3); the context (1, 2)
    # never occurs in train, so 0 gets the uniform 1 / 3. Test triples: 012, 120.
    expected = -(math.log(1 / 6) + math.log(1 / 3)) / 2
    assert math.isclose(count_cross_entropy(train, test, 3, order=2), expected, rel_tol=1e-12)
    with pytest.raises(ValueError, match="order must be >= 0"):
        count_cross_entropy(train, test, 3, order=-1)
    with pytest.raises(ValueError, match="order=40 is too large for vocab=3"):
        count_cross_entropy(train, test, 3, order=40)
    with pytest.raises(ValueError, match="test must hold >= 4 ids"):
        count_cross_entropy(train, test[:3], 3, order=3)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab=2\)"):
        count_cross_entropy(train, test, 2, order=0)


@given(
    train=st.lists(st.integers(0, 3), min_size=4, max_size=40),
    test=st.lists(st.integers(0, 3), min_size=4, max_size=20),
    order=st.integers(0, 3),
)
def test_count_model_matches_a_dictionary_of_counts(train, test, order):
    joint = Counter(tuple(train[i : i + order + 1]) for i in range(len(train) - order))
    context = Counter(tuple(train[i : i + order]) for i in range(len(train) - order))
    logs = [
        math.log(
            (joint[tuple(test[i : i + order + 1])] + 1) / (context[tuple(test[i : i + order])] + 4)
        )
        for i in range(len(test) - order)
    ]
    got = count_cross_entropy(torch.tensor(train), torch.tensor(test), 4, order=order)
    assert math.isclose(got, -sum(logs) / len(logs), rel_tol=1e-12)


def test_on_the_book_the_bigram_beats_the_unigram():
    ids = CharVocab(book_text()).encode(book_text())
    cut = int(0.9 * len(ids))
    unigram = count_cross_entropy(ids[:cut], ids[cut:], int(ids.max()) + 1, order=0)
    bigram = count_cross_entropy(ids[:cut], ids[cut:], int(ids.max()) + 1, order=1)
    assert bigram < unigram < math.log(int(ids.max()) + 1)
