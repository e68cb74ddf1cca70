"""Fine-tuning the encoder layers with the head: it learns, it is reproducible, it round-trips."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")

from assistant.safety.dataset import DATA_DIR, load_examples  # noqa: E402
from assistant.safety.encoder import load_encoder, load_tuned  # noqa: E402
from assistant.safety.finetune import finetune, pool, save_layers  # noqa: E402
from assistant.safety.lean_encoder import LeanEncoder  # noqa: E402
from assistant.safety.ngrams import ngram_features  # noqa: E402
from assistant.safety.prepare import prepare  # noqa: E402
from assistant.safety.train import CLASSES, predict, targets  # noqa: E402
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
    assert a.head["w1"].shape == (384 + 4096 + 2, 16)


def test_training_lowers_the_error_on_what_it_saw(model, sample) -> None:
    prepared, y = sample

    def error(tuned) -> float:
        with torch.inference_mode():
            emb = pool(tuned.encoder, [p.text for p in prepared]).numpy()
        side = np.stack([np.concatenate([ngram_features(p.text), p.flags()]) for p in prepared])
        unsafe = predict(tuned.head, np.hstack([emb, side]))
        return float(np.mean(np.abs((y > 0) - unsafe)))

    short = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=1, progress=False)
    longer = finetune(fresh(model), prepared, y, len(CLASSES), 16, seed=3, epochs=8, progress=False)
    assert error(longer) < error(short)


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
