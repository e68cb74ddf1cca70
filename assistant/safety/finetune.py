"""Fine-tune the lean encoder's layers end to end with the classifier head.

A head on frozen MiniLM states learns the style of whoever wrote the training lines and
little else; tuning the layers under it moves the embedding itself towards what makes a
request unsafe. The network is the one that is served: `LeanEncoder.forward` (float32,
with BERT's dropout while training) -> for each window of the text (`classifier.windows`),
the L2-normalised mean of its token states -> [embedding | the window's hashed n-grams |
disguise flags] -> the MLP head of `head.py`, each text's loss taken on its worst window:
what the classifier reads and decides on. The word and
position embeddings stay frozen (the model still provides them); the layers learn at a
small rate, the head at a larger one, with warm-up and linear decay, class-balanced
cross-entropy with label smoothing, and one fixed seed: same data, same weights.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from assistant.safety.classifier import side_features, windows
from assistant.safety.encoder import segments
from assistant.safety.lean_encoder import LeanEncoder
from assistant.safety.prepare import Prepared

# Standard BERT fine-tuning settings, scaled to ~5,000 short examples. The head trained here
# serves the layers' training; train.py then fits the served head on the tuned features
# (REFIT_HEAD, with the numbers that chose it).
EPOCHS = 4
BATCH = 32
ENCODER_LR = 3e-5
HEAD_LR = 1e-3
WARM_HEAD_LR = 1e-4  # for a head that starts trained
ENCODER_DROPOUT = 0.1
HEAD_DROPOUT = 0.3  # as the frozen head's training uses
WARMUP = 0.1  # share of the steps with a rising learning rate
# The tuned layers, next to the head's weights.
ENCODER_FILE = "encoder.safetensors"


@dataclass(slots=True)
class Tuned:
    encoder: LeanEncoder  # float32, its layer tensors trained in place
    head: dict[str, np.ndarray]  # w1, b1, w2, b2 as `Head` stores them


def finetune(
    encoder: LeanEncoder,
    prepared: list[Prepared],
    y: np.ndarray,
    classes: int,
    hidden: int,
    seed: int,
    epochs: int = EPOCHS,
    progress: bool = True,
    head: dict[str, np.ndarray] | None = None,
) -> Tuned:
    """Train `encoder`'s layers (a fresh float32 copy: they change in place) with a head.

    `head`: start from this head (trained on the frozen encoder's features) and move it at
    the encoder's small rate, instead of a new head at HEAD_LR: tuning the layers under a
    head that already fits keeps more of what the pretrained features know.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    layers = list(encoder.tensors().values())
    for t in layers:
        t.requires_grad_(True)
    texts = [p.text for p in prepared]
    spans = [windows(t) for t in texts]
    side = [torch.from_numpy(side_features(p, s)) for p, s in zip(prepared, spans, strict=True)]
    width = encoder.word.shape[1] + side[0].shape[1]
    first, second = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, classes)
    if head is not None:
        with torch.no_grad():
            first.weight.copy_(torch.from_numpy(head["w1"].T))
            first.bias.copy_(torch.from_numpy(head["b1"]))
            second.weight.copy_(torch.from_numpy(head["w2"].T))
            second.bias.copy_(torch.from_numpy(head["b2"]))
    yt = torch.from_numpy(y)
    counts = torch.bincount(yt, minlength=classes).clamp(min=1).float()
    loss_fn = torch.nn.CrossEntropyLoss(
        weight=counts.sum() / (classes * counts), label_smoothing=0.1
    )
    optimiser = torch.optim.AdamW(
        [
            {"params": layers, "lr": ENCODER_LR, "weight_decay": 0.01},
            {
                "params": [*first.parameters(), *second.parameters()],
                "lr": HEAD_LR if head is None else WARM_HEAD_LR,
                "weight_decay": 0.1,
            },
        ]
    )
    lengths = np.array([len(t) for t in texts])
    steps = epochs * -(-len(texts) // BATCH)
    warm = max(int(WARMUP * steps), 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warm, max(steps - s, 0) / max(steps - warm, 1))
    )
    bar = tqdm(total=steps, desc="fine-tune", file=sys.stderr, disable=not progress)
    for _ in range(epochs):
        for batch in _batches(lengths, rng):
            pooled = pool(
                encoder, [texts[i] for i in batch], [spans[i] for i in batch], ENCODER_DROPOUT
            )
            rows = torch.cat([side[i] for i in batch])
            x = F.dropout(torch.cat([pooled, rows], dim=1), HEAD_DROPOUT)
            logits = second(F.dropout(torch.relu(first(x)), HEAD_DROPOUT))
            owner = np.repeat(np.arange(len(batch)), [len(spans[i]) for i in batch])
            loss = loss_fn(logits[worst_windows(logits, owner)], yt[torch.from_numpy(batch)])
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(layers, 1.0)
            optimiser.step()
            schedule.step()
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.close()
    for t in layers:
        t.requires_grad_(False)
    weights = {
        "w1": first.weight.detach().numpy().T.copy(),
        "b1": first.bias.detach().numpy().copy(),
        "w2": second.weight.detach().numpy().T.copy(),
        "b2": second.bias.detach().numpy().copy(),
    }
    return Tuned(encoder, weights)


def pool(
    encoder: LeanEncoder, texts: list[str], spans: list[list[tuple[int, int]]], dropout: float = 0.0
) -> torch.Tensor:
    """L2-normalised mean of the token states in each span of each text, rows grouped by
    text: what `embed_spans` computes (long texts read in the same segments), differentiable.
    """
    segs = segments(encoder.tokenizer, texts)
    states = encoder.forward(segs.input_ids, segs.attention_mask, dropout)
    vectors = []
    for i, text_spans in enumerate(spans):
        rows, weights = segs.pooling(i, text_spans)
        tokens = states[rows].reshape(-1, states.shape[-1])
        w = torch.from_numpy(weights)
        vectors.append(w @ tokens / w.sum(1, keepdim=True).clamp(min=1.0))
    return F.normalize(torch.cat(vectors), dim=1)


def worst_windows(logits: torch.Tensor, owner: np.ndarray) -> torch.Tensor:
    """For each text, the row of its window with the highest unsafe score (1 - P(benign)),
    the one the served classifier decides on. `owner`: the text of each row, rows grouped
    by text in order."""
    with torch.no_grad():
        benign = torch.log_softmax(logits, dim=1)[:, 0].numpy()
    order = np.lexsort((benign, owner))
    first = np.r_[True, owner[order][1:] != owner[order][:-1]]
    return torch.from_numpy(order[first])


def _batches(lengths: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of similar-length texts (little padding), in shuffled order."""
    noisy = lengths + rng.uniform(0, 20, len(lengths))
    order = np.argsort(noisy)
    batches = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
    return [batches[i] for i in rng.permutation(len(batches))]


def save_layers(encoder: LeanEncoder, path) -> None:
    """The tuned layer weights in float16 (about 10 MB for 3 layers), safetensors."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in encoder.tensors().items()}
    save_file(tensors, str(path))
