"""Fine-tuning the encoder layers with the head: it learns, it is reproducible, it round-trips."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")

from assistant.safety.classifier import side_features, windows  # noqa: E402
from assistant.safety.dataset import DATA_DIR, load_examples  # noqa: E402
from assistant.safety.encoder import (  # noqa: E402
    MAX_TOKENS,
    embed_spans,
    load_encoder,
    load_tuned,
)
from assistant.safety.finetune import (  # noqa: E402
    finetune,
    pool,
    save_layers,
    worst_windows,
)
from assistant.safety.lean_encoder import LeanEncoder  # noqa: E402
from assistant.safety.ngrams import BUCKETS  # noqa: E402
from assistant.safety.prepare import prepare  # noqa: E402
from assistant.safety.train import CLASSES, targets, text_scores  # noqa: E402
from assistant.settings import Settings  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return load_encoder(Settings().embedding_model_path(), "cpu")


def fresh(model) -> LeanEncoder:
    return LeanEncoder(model[0].auto_model, model.tokenizer, 2, torch.device("cpu"), torch.float32)


@pytest.fixture(scope="module")
def sample():
    examples = load_examples(DATA_DIR / "train.jsonl")
    rng = np.random.default_rng(0)
    picked = [examples[i] for i in rng.choice(len(examples), 48, replace=False)]
    return [prepare(ex.text) for ex in picked], targets(picked)


def test_same_seed_same_weights_and_the_layers_move(model, sample) -> None:
    prepared, y = sample
    a = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=1, progress=False)
    b = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=1, progress=False)
    for name, t in a.encoder.tensors().items():
        assert torch.equal(t, b.encoder.tensors()[name]), name
    for name in ("w1", "b1", "w2", "b2"):
        assert np.array_equal(a.head[name], b.head[name]), name
    before = fresh(model).tensors()
    moved = [n for n, t in a.encoder.tensors().items() if not torch.equal(t, before[n])]
    assert len(moved) == len(before)
    assert a.head["w1"].shape == (384 + BUCKETS + 2, 16)


def test_training_lowers_the_error_on_what_it_saw(model, sample) -> None:
    prepared, y = sample

    spans = [windows(p.text) for p in prepared]
    side = np.vstack([side_features(p, s) for p, s in zip(prepared, spans, strict=True)])
    owner = np.repeat(np.arange(len(spans)), [len(s) for s in spans])

    def error(tuned) -> float:
        with torch.inference_mode():
            emb = pool(tuned.encoder, [p.text for p in prepared], spans).numpy()
        unsafe = text_scores(tuned.head, np.hstack([emb, side]), owner)
        return float(np.mean(np.abs((y > 0) - unsafe)))

    short = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=1, progress=False)
    longer = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=8, progress=False)
    assert error(longer) < error(short)


def test_training_pools_the_windows_the_classifier_reads(model) -> None:
    texts = [ex.text for ex in load_examples(DATA_DIR / "train.jsonl") if len(ex.text) > 300][:8]
    spans = [windows(t) for t in texts]
    assert all(len(s) > 1 for s in spans)
    encoder = fresh(model)
    with torch.inference_mode():
        trained = pool(encoder, texts, spans).numpy()
    served = np.vstack(embed_spans(encoder, texts, spans))
    np.testing.assert_allclose(trained, served, atol=1e-5)


def test_training_pools_every_window_of_a_text_longer_than_a_segment(model) -> None:
    text = " ".join(ex.text for ex in load_examples(DATA_DIR / "test_scripts.jsonl")[:6])
    assert len(model.tokenizer(text)["input_ids"]) > MAX_TOKENS
    spans = windows(text)
    encoder = fresh(model)
    with torch.inference_mode():
        trained = pool(encoder, [text], [spans]).numpy()
    served = embed_spans(encoder, [text], [spans])[0]
    np.testing.assert_allclose(trained, served, atol=1e-5)


def test_the_worst_window_is_the_least_benign_of_each_text() -> None:
    logits = torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 3.0], [1.0, 0.0], [0.0, 0.0]])
    owner = np.array([0, 0, 0, 1, 2])
    assert worst_windows(logits, owner).tolist() == [2, 3, 4]


def test_saved_layers_load_back_as_float16_values(model, tmp_path) -> None:
    encoder = fresh(model)
    path = tmp_path / "encoder.safetensors"
    save_layers(encoder, path)
    loaded = load_tuned(path)
    assert set(loaded) == set(encoder.tensors())
    for name, t in encoder.tensors().items():
        assert loaded[name].dtype == torch.float32
        assert torch.equal(loaded[name], t.half().float()), name


def test_a_warm_head_is_moved_only_a_little(model, sample) -> None:
    prepared, y = sample
    start = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=1, progress=False)
    warm = finetune(
        fresh(model),
        prepared,
        y,
        len(CLASSES),
        16,
        seed=4,
        epochs=1,
        progress=False,
        head=start.head,
    )
    change = np.abs(warm.head["w1"] - start.head["w1"]).max()
    assert 0 < change < 1e-2
