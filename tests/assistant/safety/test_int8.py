"""The int8 encoder (served on CPUs without AMX) decides as the float32 one does."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")

from assistant.safety.classifier import SafetyClassifier  # noqa: E402
from assistant.safety.dataset import DATA_DIR, load_examples  # noqa: E402
from assistant.settings import Settings  # noqa: E402


@pytest.mark.skipif(
    "fbgemm" not in torch.backends.quantized.supported_engines, reason="no fbgemm int8 kernels"
)
def test_int8_and_float32_classifiers_agree_on_validation() -> None:
    path = Settings().embedding_model_path()
    exact = SafetyClassifier.load(path, "cpu", precision="float32")
    int8 = SafetyClassifier.load(path, "cpu", precision="int8")
    assert exact.encoder is not int8.encoder
    texts = [ex.text for ex in load_examples(DATA_DIR / "val.jsonl")]
    a, b = exact.check_inputs(texts), int8.check_inputs(texts)
    labels = sum(x.label == y.label for x, y in zip(a, b, strict=True)) / len(texts)
    decisions = sum(x.decision == y.decision for x, y in zip(a, b, strict=True)) / len(texts)
    # Labels: the refuse threshold. Decisions add the caution band (from half the refuse
    # threshold up), where most differences are: allow vs allow with caution. On an AMD CPU
    # (avx512 int8 kernels) the committed head's predecessor differed on 11 of 1,390 labels
    # (0.992), decisions 0.968 (45 differ); on an Intel one the committed weights on 9 (0.994),
    # decisions 0.975 (35); earlier weights on 8 to 14 labels, decisions 0.967-0.974.
    assert labels >= 0.985 and decisions >= 0.96, (labels, decisions)
    gap = max(
        abs(x.categories[c] - y.categories[c])
        for x, y in zip(a, b, strict=True)
        for c in x.categories
    )
    # 0.18 at worst with the previous head on an AMD CPU with avx512 int8 kernels, 0.17 with
    # the committed one on an Intel CPU. 0.31 with earlier ones where only avx2 kernels ran:
    # a Spanish harassment request scored harassment 0.58 in float32, 0.27 in int8, the rest
    # of its unsafe score going to privacy and violence. The unsafe score itself moved 0.12
    # at most.
    assert gap < 0.35


@pytest.mark.skipif(
    "fbgemm" not in torch.backends.quantized.supported_engines, reason="no fbgemm int8 kernels"
)
def test_int8_scores_do_not_depend_on_the_batch() -> None:
    # int8 activations get one scale per product: batched texts would share it (and the
    # padding's), so a text scored among others (threshold placement, evaluation, --file)
    # would score differently from the same text checked alone, as served.
    int8 = SafetyClassifier.load(Settings().embedding_model_path(), "cpu", precision="int8")
    examples = load_examples(DATA_DIR / "val.jsonl")
    texts = [ex.text for ex in examples if len(ex.text) > 200][:4] + [
        ex.text for ex in examples[:12]
    ]
    together = [r.to_dict() for r in int8.check_inputs(texts)]
    assert together == [int8.check_input(t).to_dict() for t in texts]
