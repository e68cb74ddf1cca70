"""Train the classifier: `python -m assistant.safety.train [--seed S] [--cv K]`.

Reads data/train.jsonl (hand-written) and data/train_synth.jsonl (written by
`assistant.safety.synth`), fine-tunes the lean encoder's layers
together with a head (`finetune.py`; `--encoder-epochs 0` keeps them frozen, see
ENCODER_EPOCHS), trains the served MLP head on that encoder's features, picks the
refuse threshold on data/val.jsonl and data/val_scripts.jsonl with the classifier as it is
served, writes weights/ (head, thresholds, tuned layers if any) and prints the validation
report.
`--cv K` instead prints K-fold cross-validation on the hand-written examples: that is how
the head's size and the training lengths were chosen. The held-out splits,
data/test.jsonl and data/test_scripts.jsonl (sixteen languages written in non-Latin
scripts, which test.jsonl hardly has), are not read here: they are exams taken once, with
`assistant safety eval`, after the weights are final. val.jsonl is written by seven authors
who wrote no training line: 619 lines, then 110 pastes of 306-511 characters in Latin
scripts, so that the threshold sees long benign texts, then 362 Latin-script lines from
three more (84 of them 364-483 characters), then 299 Latin-script lines from two more
(180 benign, two thirds of those hard negatives; 21 near copies of training lines dropped).
Earlier validation splits, once they stopped telling variants apart or once briefs had been
drawn from their misses, joined the training data. Both have now happened to val.jsonl (see
the end of the history above ENCODER_EPOCHS): data/val_next.jsonl (1,397 lines, 787 benign,
by eight authors who wrote no training line; 29% under 80 characters, 37% 200-499; about
60% English, the rest in 21 other languages) replaces it when it joins training at the next
retrain. Nothing here reads val_next.jsonl yet. On it, int8: the committed head AUC 0.9789,
recall 0.880 at 0.935 with 15 benign refused; the head before it 0.9770 (+0.0005 to +0.0033,
paired bootstrap), 0.870 with 17.
data/val_scripts.jsonl (twenty languages in non-Latin scripts, ~43 lines each, by three
authors who wrote no training line) is a second validation split, for the scripts val.jsonl
holds few lines of: the threshold may refuse at most MAX_SCRIPTS_FALSE_POSITIVES of its
benign lines too, and its report is printed after val.jsonl's.
Same seed, same data, same --threads -> same weights and threshold.
`--place-threshold` trains nothing: it tunes the threshold of the weights in --out on the
validation splits again (after they change, or for a machine that serves another precision).
`--head-only` keeps the tuned layers in --out and trains only a new head on them (15-35
min instead of ~2 h): how the committed head was made (see the history above ENCODER_EPOCHS).
data/train_pending.jsonl, when there is one, holds lines waiting for a retrain that adopts
them (the history says why they wait); nothing here reads it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from assistant.safety.classifier import SafetyClassifier, chunk_features, windows
from assistant.safety.dataset import DATA_DIR, Example, load_examples
from assistant.safety.encoder import load_encoder, load_lean_encoder
from assistant.safety.finetune import ENCODER_FILE, finetune, save_layers, worst_windows
from assistant.safety.head import WEIGHTS_DIR, Head, Thresholds
from assistant.safety.lean_encoder import LeanEncoder
from assistant.safety.metrics import evaluate
from assistant.safety.ngrams import BUCKETS
from assistant.safety.prepare import FLAG_NAMES, Prepared, prepare
from assistant.safety.result import CATEGORIES
from assistant.settings import Settings

CLASSES = ["benign", *CATEGORIES]
# The issue allows 3% false positives on benign requests. At most this share of benign
# validation examples may be refused: 3% less about one standard error of the estimate
# (~0.9 points on the ~310-360 benign lines val.jsonl had when this was set; ~0.6 on its
# 772 now), so a threshold on the noisy edge does not overshoot on new data. It was half the
# budget (1.5%) while validation was an older split whose style the training lines had come
# to share (validation 1.2%, held-out 3.9%); val.jsonl is now written by authors who wrote
# no training line, as test.jsonl was. The 37,774-line weights had their threshold (0.90)
# placed on 619 of its lines; on the 472 added later it refused 5.0% of the benign, not
# 2.2%: the margin is needed. The 44,097-line weights' threshold (0.925) was placed on
# 1,091 lines; on the 299 added after it refused 4.4% of the benign (8 of 180, two thirds
# hard negatives), recall 0.908; placed at a 3% budget (0.89) it would refuse 6.7% there.
MAX_VAL_FALSE_POSITIVES = 0.02
# And at most this share of val_scripts.jsonl's 434 benign lines (15): what the 44,097-line
# weights (with their own head, before the head-only ones) refused there at the threshold a
# 2% budget on all 1,390 val.jsonl lines gives them (0.955: 14 on an Intel CPU, 12 on an AMD
# one), plus one line.
# (At the 0.925 they were served with, placed on 1,091 lines before this limit existed,
# they refused 27.) Two retrains placed on val.jsonl alone landed lower (0.940) and refused
# 19 of them, though every threshold-free measure on both splits improved: one threshold
# serves both populations, so both bound it. The committed weights: 0.935, refusing 14 of
# val.jsonl's 772 benign lines and 15 of these.
MAX_SCRIPTS_FALSE_POSITIVES = 0.035
BATCH = 32
DROPOUT = 0.3
# Chosen by 5-fold CV on train.jsonl (recall at 1.5% / 3% out-of-fold false positives):
# 32 units x 150 epochs 0.628 / 0.710, 64 x 250 0.694 / 0.762, 128 x 300 0.676 / 0.761.
# With the 102 examples added since: 64 x 250 0.712 / 0.756, 64 x 400 0.673 / 0.758.
# On 22.2k lines (four more authors) and 16,384 n-gram buckets, a head on fixed tuned-encoder
# features scored on val.jsonl: 64 units 0.888 / 5.5%, 128 units 0.907 / 4.7% (recall at
# 1.5% / false positives at 95% recall). A head alone on the 44,097-line tuned layers with
# 48,707 lines (int8, each placed by the rule): 256 units val.jsonl AUC 0.9896 against
# 0.9889 (interval +0.0002 to +0.0014), val_scripts.jsonl 0.938 against 0.934, but placed
# higher (0.950 against 0.945) with recall there 0.871 against 0.890 and 0.634 against
# 0.651; by the rule set before the run that kept 128 (256 took 68 min to train against
# 36, both with other work on the machine).
HIDDEN = 128
EPOCHS = 250
# Heads trained alike with consecutive seeds and served as one (`merge_heads`). Three heads
# (seeds 13-15, ~11 min each on an Intel CPU) on the 44,097-line tuned layers with 48,707
# lines, int8, both placed at 0.940 by the rule: val.jsonl AUC 0.9899 against 0.9897
# (interval -0.0002 to +0.0005), recall 0.895 against 0.890, 15 of 772 benign refused by
# both; val_scripts.jsonl AUC 0.939 against 0.936 (+0.002 to +0.005) but recall 0.664
# against 0.676, 15 against 14 of 434 benign refused. The rule set before the run allowed
# 1 point less recall there at most (0.666), so one head stays.
HEADS = 1
# Epochs fine-tuning the encoder layers with the head (finetune.py); 0 keeps them frozen
# and trains the head alone for EPOCHS full-batch epochs. With REFIT_HEAD the head trained
# with the layers is then replaced by one trained on the tuned layers' features as the
# frozen one is: ~1,000 mini-batch steps fit the n-gram weights less well than EPOCHS
# full-batch epochs. Chosen on val.jsonl (3 layers, training read in windows, served
# bfloat16 encoder; recall at <= 1.5% false positives / false positives at 95% recall,
# seed 13 then seed 1): frozen 0.939 / 2.2%, 0.916 / 2.9% (seed 2 0.939 / 2.4%);
# fine-tuned 4 epochs with a new head 0.816 / 7.1%, 0.812 / 8.3%; the same layers with the
# head refit 0.950 / 1.5%, 0.962 / 1.2%; 3 epochs from a head trained on the frozen
# features (--warm-head) 0.946 / 1.7%, 0.935 / 2.2% (head refit 0.931 / 2.0%, seed 1).
# More layers were not tried: with 4 a 500-character input already takes ~15 ms at p95.
# An earlier 5-fold CV had fine-tuning lose with a new head (its head was never refit).
# Those numbers are on 5,188 training lines; on 8,420 (two more authors) the default gives
# 0.950 / 1.2% with seed 13, 0.923 / 2.0% with seed 1. On today's validation split (a new
# author) those weights give 0.781 / 12.7%; retrained on 13,176 lines 0.773 / 13.3%, on
# 17,577 (six more authors in all) 0.800 / 10.0% (int8 encoder, seed 13); on 24,553 (six
# more) with 16,384 n-gram buckets and 128 hidden units 0.921 / 5.0% (bfloat16, seed 13).
# On a new blind split (619 lines, those close to training lines dropped; int8 encoder):
# those weights 0.869 / 12.7% (recall at 2% / false positives at 95% recall), retrained on
# 31,127 lines (six more authors) 0.872 / 7.3%. Most misses there are blatant requests in
# scripts MiniLM's English vocabulary splits into pieces (Hebrew, Arabic, Cyrillic, CJK).
# Retrained on 37,774 (six more authors, mostly non-Latin scripts): 0.902 / 5.1% against
# 0.872 / 7.6% before (bfloat16 encoder). Retrained on 40,935 (Georgian, Armenian, Ge'ez,
# South and Southeast Asian scripts, contact details), int8 encoder: val.jsonl 0.902 / 7.0%
# against 0.895 / 5.7%, val_scripts.jsonl recall at 5% false positives 0.623 against 0.517;
# not adopted (the rule set before the run allowed false positives at 95% recall to rise
# by 1 point at most). Retrained again with long texts pooled in segments (int8): val.jsonl
# 0.895 / 7.6%, AUC 0.986 against 0.987; val_scripts.jsonl recall at 5% 0.669 against 0.517
# (bootstrap 90% interval of the gain +8 to +21 points), benign refused 12.7% against 20.3%;
# it passed validation but its non-Latin exam refused 15.8% of benign lines (recall 0.799),
# over that test's 13% floor, so by the rule set before the run it was withdrawn. The
# committed weights were then still those trained on 37,774 lines at commit e59468b (long
# texts cut at 256 tokens).
# val_scripts.jsonl then grew by 397 lines from two more authors, ~78% of their benign
# lines hard negatives: there both refuse a third of the benign lines (the 37,774-line
# weights 32.3%, the withdrawn ones 33.8%; recall 0.754 and 0.829), so neither reads
# non-Latin hard negatives well.
# val.jsonl then grew by 110 long Latin-script pastes (75 benign): the 37,774-line weights
# caught all 35 unsafe and refused 6 benign (8%, against ~2% on shorter lines); their
# threshold had been placed before they were added.
# Retrained on 42,932 lines (1,997 more non-Latin, 65% benign), int8, thresholds placed on
# 729 val.jsonl lines: val.jsonl the same within noise (false positives at 95% recall 10.3%
# against 8.2%, interval of the difference -3.5 to +3.9 points); val_scripts.jsonl AUC 0.911
# against 0.830, benign refused at the threshold 3.7% against 11.8%. Not adopted: the rule
# set before the run capped the 10.3% at 8.5%, and on 362 fresh Latin lines (then added to
# val.jsonl) its AUC was lower, 0.9889 against 0.9910 (interval -0.0041 to -0.0002).
# train.jsonl then grew to 44,097 lines (+1,165, 823 benign, half 200+ characters, half
# Latin). The committed weights are trained on them by this code (seed 13, --threads 2, 100
# min), threshold placed on 1,091 val.jsonl lines, int8: val.jsonl recall at 2% 0.902
# against 0.872, false positives at 95% recall 5.7% against 7.4%, AUC 0.9874 against 0.9860;
# val_scripts.jsonl AUC 0.913 against 0.830, benign refused at each one's threshold 6.2%
# against 11.8%. The rule set before the run (non-inferiority on val.jsonl, gains on
# val_scripts.jsonl) held.
# data/train_pending.jsonl: 2,351 lines by five more blind authors (non-English Latin,
# South/Southeast Asian and other scripts, subtle English; 18 near copies of held-out lines
# and 81 exact or near copies of training lines dropped). Retrained with them (46,448
# lines, int8, both thresholds placed on all 1,390 val.jsonl lines: 0.940 against 0.955):
# val.jsonl AUC 0.9874 against 0.9870, recall at 2% 0.882 against 0.874, false positives at
# 95% recall 6.1% against 6.6% (all within noise); val_scripts.jsonl AUC 0.922 against
# 0.913 (interval +0.003 to +0.015), recall at the threshold 0.641 against 0.575, but benign
# refused 4.4% against 3.2% (19 and 14 of 434): the rule set before the run allowed 1 point
# more at most, so it was not adopted and the lines wait there for the next retrain.
# Then 1,272 more lines by five more blind authors joined that file: workplace messages in
# 32 languages written in non-Latin scripts, 70% benign hard negatives (approval limits,
# tax and loan arithmetic, safety notices, rewrite-this-notice requests) with unsafe
# contrast partners in the same domains; 6 near copies of training lines dropped.
# Retrained with all 3,623 (47,720 lines, 142 min; int8, thresholds placed on the 1,390
# val.jsonl lines: 0.940 against 0.955): val.jsonl AUC 0.9893 against 0.9870 (interval
# +0.0006 to +0.0044), recall at 2% 0.887 against 0.874, false positives at 95% recall 5.7%
# against 6.6%; val_scripts.jsonl AUC 0.933 against 0.913 (+0.012 to +0.028), recall at the
# threshold 0.664 against 0.575, benign refused again 4.4% against 3.2% (19 and 14 of 434,
# 10 of them refused by both; spread over 15 languages): over the same 1-point allowance,
# set before the run, so not adopted either.
# Then 987 more lines by four more blind authors joined it (37 languages, 25 in non-Latin
# scripts; 71% benign: admin and policy questions, safety notices, rewrite requests with
# alarming words; 25 near copies of training lines and 2 of held-out lines dropped).
# Retrained with all 4,610 (48,707 lines, 6,575 s of training on 2 threads; int8, threshold
# placed on both validation splits, which for both weights is the val.jsonl one: 0.945
# against 0.955): val.jsonl AUC 0.9896 against 0.9870 (+0.0009 to +0.0047), recall at the
# threshold 0.890 against 0.867 (+1.0 to +3.7 points); val_scripts.jsonl AUC 0.937 against
# 0.913 (+0.016 to +0.032), recall 0.664 against 0.575, benign refused 15 against 14 of 434.
# It passed the rule set before the run, but on the exams (taken once) test_scripts.jsonl
# recall with bfloat16 was 0.616, under that test's 0.62 floor (int8 0.623; test.jsonl
# int8 0.927 at 0.6%, bfloat16 0.930), so by the same rule it was withdrawn. That floor
# came from the committed weights at the 0.925 they were served with, which by then the
# placement rule no longer gave them (0.955): the comparison was not at matched thresholds.
# The first head alone (--head-only): the 44,097-line tuned layers kept, a new head trained
# on them with all 48,707 lines (seed 13, 2 threads; 36 min on an AMD CPU, encoding
# included), the 4,610 pending lines merged into train.jsonl. Rule set before it existed:
# both weights placed by the same rule (0.945 against 0.955), compared on validation, then
# one exam each. Int8, paired bootstrap 90% intervals: val.jsonl AUC 0.9889 against 0.9862
# (+0.0013 to +0.0045), recall at the threshold 0.890 against 0.866 (+1.1 to +3.7 points),
# 15 of 772 benign refused by both; val_scripts.jsonl AUC 0.934 against 0.912 (+0.015 to
# +0.029), recall 0.651 against 0.561 (+6.6 to +11.5 points), 14 against 12 of 434 benign
# refused. Exams: test.jsonl int8 0.933 at 0.6% against 0.927 at 0.8%, bfloat16 0.924 at
# 0.6% against 0.927 at 0.8%; test_scripts.jsonl int8 0.616 at 2.0% against 0.533 at 2.7%,
# bfloat16 0.619 at 2.3% against 0.543 at 2.0%. So the head gets about all the 48,707-line
# retrain gained on validation (AUC 0.9896 / 0.937 there) in a quarter of the time. Adopted.
# The operating point is what stood between those weights and recall 0.95 on test.jsonl:
# at 0.945 they refused 0.6% of its benign lines but 1.9% of val.jsonl's, whose authors
# wrote benign lines this model finds harder.
# Then 1,014 lines by four more blind authors (40 languages, 555 unsafe; 25 near copies of
# training lines, 1 of a held-out line dropped) joined train.jsonl (49,721 lines), and the
# next head was a --head-only run with them on the same layers (seed 13, 2 threads; 20
# min on an AMD CPU, encoding included). Rule set before the run: both placed by the rule,
# int8; on both splits the AUC difference's 90% interval (paired bootstrap) above -0.005,
# recall at the threshold no lower on val.jsonl and at most 1 point lower on
# val_scripts.jsonl; then one exam, over the test floors. Both placed at 0.940: val.jsonl
# AUC 0.9899 against 0.9897 (-0.0002 to +0.0006), recall 0.892 against 0.890, 14 against
# 15 of 772 benign refused; val_scripts.jsonl AUC 0.937 against 0.936 (-0.001 to +0.004),
# recall 0.683 against 0.676, 15 against 14 of 434. Exams: test.jsonl int8 0.930 at 0.6%,
# bfloat16 0.924 at 0.8% (every category 0.85 or more); test_scripts.jsonl int8 0.619 at
# 2.3%, bfloat16 0.637 at 2.3%; int8 and float32 labels differ on 11 of 1,390 val.jsonl
# lines. Adopted: within noise on validation, as a head on 2% more lines should be. The
# operating point still stands between it and 0.95: it refuses 0.6% of test.jsonl's benign
# lines, 1.8% of val.jsonl's.
# The classifier was weakest on short texts (val.jsonl recall 0.794 under 80 characters,
# 0.94-0.97 above). Four more blind authors wrote 1,040 lines aimed there: terse chat-box
# messages in English, in 13 other Latin-script languages and in 14 non-Latin ones, and
# the four weakest categories (self-harm, fraud, malicious code, violence) at mixed
# lengths; 133 near copies of training lines and 24 of held-out lines dropped, 883 kept
# (464 unsafe, 707 under 80 characters). The next head: --head-only with them (50,604
# lines, 23 min), by the same rule set before the run. Int8, placed at 0.935 against 0.940:
# val.jsonl AUC 0.9904 against 0.9899 (+0.0002 to +0.0010), recall 0.903 against 0.892
# (+0.5 to +1.9 points), 15 against 14 of 772 benign refused; val_scripts.jsonl AUC 0.937
# for both (-0.002 to +0.002), recall 0.708 against 0.683 (+1.4 to +3.9), 14 against 15 of
# 434. Exams: test.jsonl int8 0.933 at 0.6%, bfloat16 0.936 at 0.8% (every category 0.85
# or more); test_scripts.jsonl int8 0.630 at 2.3%, bfloat16 0.647 at 2.7%. Adopted.
# Then two rounds by fifteen more blind authors. Round one, 1,610 lines (non-office
# workplaces, 15 rarely seen languages, disguised requests, the sensitive categories in 18
# languages, non-English fraud, privacy, malicious code and injection): a head with them
# (52,214 lines) had the higher AUC on both splits (0.9914 against 0.9904, +0.0004 to
# +0.0015; 0.9394 against 0.9367) but was placed at 0.940, where it refused 13 of 772 and
# 13 of 434, and its recall there was 0.900 and 0.694 against 0.903 and 0.708: under the
# rule set before the run, so not adopted. At matched numbers of benign lines refused the
# two are within noise: the 0.005 steps of the threshold decide such a tie. Round two, 1,903
# lines (six groups of languages and English, each line hinging on different words, and
# pasted documents hiding instructions), under a rule written before it too: the committed
# head, --head-only with both rounds (54,117 lines, 692 s on an Intel CPU, encoding
# included). Int8, both placed at 0.935: val.jsonl AUC 0.9921 against 0.9904 (+0.0006 to
# +0.0028), recall 0.908 against 0.903 (-0.3 to +1.4 points), 14 against 15 of 772 benign
# refused; val_scripts.jsonl AUC 0.9415 against 0.9367 (+0.0014 to +0.0084), recall 0.720
# against 0.708, 15 against 14 of 434. Exams: test.jsonl int8 0.939 at 0.6%, bfloat16 0.939
# at 0.8% (every category 0.85 or more); test_scripts.jsonl int8 0.633 at 1.3%, bfloat16
# 0.651 at 1.3%; int8 and float32 labels differ on 9 of 1,390 val.jsonl lines. Adopted.
# A caveat found after: the briefs of four of those authors (non-English fraud and privacy,
# non-English malicious code and injection, English, pasted documents; 911 kept lines) named
# request ideas read off val.jsonl's misses. No author saw val.jsonl and no line is a near
# copy, but val.jsonl recall of heads trained with those lines is optimistic: two of the
# seven val.jsonl lines this head newly caught match such ideas. Placement is not affected
# (benign lines set it, and no brief drew on them); the exams are the clean measure. The
# same head without the 911 lines (53,206), under a rule written before it ran, was placed
# at 0.940 with val.jsonl AUC 0.9911 and recall 0.896 (val_scripts.jsonl 0.9412 / 0.706),
# under the 0.903 bound, so this head and its lines stayed. Briefs now name languages,
# lengths and registers only. The project's rule for such a split is to retire it into
# training and write a new one; that is the next step for val.jsonl (data/val_next.jsonl is
# written for it).
# Round three, 2,043 lines by eight more blind authors from such briefs (short, direct
# lines in 44 languages, half hard negatives; 182 near copies of training lines and 15 of
# held-out lines dropped): a head with them (56,160 lines, 673 s) had the higher AUC on
# both splits (0.9924 against 0.9921, -0.0001 to +0.0008; 0.9444 against 0.9415, -0.0000
# to +0.0058) but was placed at 0.940 with recall 0.905 and 0.706 against 0.908 and 0.720,
# 14 and 11 benign refused: under the rule set before it, so the lines wait in
# data/train_pending.jsonl. Three heads this round (with round one, without the 911 lines,
# with round three) lost the same way. At 15 benign lines refused on each split, the five
# heads since the 50,604-line one recall 0.901-0.916 of val.jsonl's unsafe lines and
# 0.701-0.756 of val_scripts.jsonl's, not rising with their line counts: heads on these
# layers have stopped improving with more lines. The layers (tuned on 44,097) have not read
# the 12,063 since.
ENCODER_EPOCHS = 4
REFIT_HEAD = True


def prepare_all(examples: list[Example]) -> list[Prepared]:
    return [prepare(ex.text) for ex in tqdm(examples, desc="prepare", file=sys.stderr)]


def features(
    encoder, prepared: list[Prepared], progress: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows as the classifier reads them, one per window of each text (`windows`),
    grouped by text in order, and the index of the text each row belongs to.

    Encoded in batches of similar length.
    """
    order = sorted(range(len(prepared)), key=lambda i: len(prepared[i].text))
    rows: list[np.ndarray] = [np.empty(0)] * len(prepared)
    starts = range(0, len(order), BATCH)
    for start in tqdm(starts, desc="encode", file=sys.stderr, disable=not progress):
        batch = [prepared[i] for i in order[start : start + BATCH]]
        spans = [windows(p.text) for p in batch]
        for i, row in zip(
            order[start : start + BATCH], chunk_features(encoder, batch, spans), strict=True
        ):
            rows[i] = row
    owner = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    return np.vstack(rows), owner


def targets(examples: list[Example]) -> np.ndarray:
    return np.array([CLASSES.index(ex.category) if ex.label == "unsafe" else 0 for ex in examples])


def fit(
    x: np.ndarray,
    owner: np.ndarray,
    y: np.ndarray,
    hidden: int,
    epochs: int,
    seed: int,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """A one-hidden-layer MLP, full batch, class-balanced cross-entropy.

    `x` has a row per window of each text (`features`), `y` a label per text: each text's
    loss is taken on its worst window, the one the served classifier decides on.

    The n-gram block of the features is ~97% zeros, so it goes through the first layer as a
    sparse matrix (dropout on its stored values): the same network, about ten times faster.
    """
    import torch

    torch.manual_seed(seed)
    # A feature row is [embedding | n-grams | flags] (`chunk_features`).
    lo = x.shape[1] - BUCKETS - len(FLAG_NAMES)
    hi = lo + BUCKETS
    dense = torch.from_numpy(np.hstack([x[:, :lo], x[:, hi:]]))
    grams = torch.from_numpy(np.ascontiguousarray(x[:, lo:hi])).to_sparse_coo().coalesce()
    yt = torch.from_numpy(y)
    counts = torch.bincount(yt, minlength=len(CLASSES)).clamp(min=1).float()
    weight = counts.sum() / (len(CLASSES) * counts)
    first_dense = torch.nn.Linear(dense.shape[1], hidden)
    first_grams = torch.nn.Parameter(torch.empty(hi - lo, hidden))
    torch.nn.init.kaiming_uniform_(first_grams.T, a=5**0.5)
    second = torch.nn.Linear(hidden, len(CLASSES))
    dropout = torch.nn.Dropout(DROPOUT)
    optimiser = torch.optim.AdamW(
        [*first_dense.parameters(), first_grams, *second.parameters()], lr=3e-3, weight_decay=0.1
    )
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight, label_smoothing=0.1)
    for _ in tqdm(range(epochs), desc="train", file=sys.stderr, disable=not progress):
        kept = grams.values() * (torch.rand_like(grams.values()) >= DROPOUT) / (1 - DROPOUT)
        sparse = torch.sparse_coo_tensor(grams.indices(), kept, grams.shape, is_coalesced=True)
        h = first_dense(dropout(dense)) + torch.sparse.mm(sparse, first_grams)
        logits = second(dropout(torch.relu(h)))
        optimiser.zero_grad()
        loss_fn(logits[worst_windows(logits, owner)], yt).backward()
        optimiser.step()
    w1 = first_dense.weight.detach().numpy().T
    return {
        "w1": np.vstack([w1[:lo], first_grams.detach().numpy(), w1[lo:]]),
        "b1": first_dense.bias.detach().numpy().copy(),
        "w2": second.weight.detach().numpy().T.copy(),
        "b2": second.bias.detach().numpy().copy(),
    }


def fit_heads(
    x: np.ndarray,
    owner: np.ndarray,
    y: np.ndarray,
    args,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """`args.heads` heads fitted alike with seeds --seed, --seed + 1, ..., served as one
    (`merge_heads`); one head is `fit` as it was."""
    seeds = range(args.seed, args.seed + args.heads)
    return merge_heads([fit(x, owner, y, args.hidden, args.epochs, s, progress) for s in seeds])


def merge_heads(heads: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One MLP whose logits are the mean of the heads' logits: their hidden units side by
    side, each head's output weights divided by the number of heads. The served classifier
    reads it as any head (`Head.probabilities`), at the cost of a wider hidden layer."""
    n = len(heads)
    return {
        "w1": np.hstack([h["w1"] for h in heads]),
        "b1": np.concatenate([h["b1"] for h in heads]),
        "w2": np.vstack([h["w2"] for h in heads]) / n,
        "b2": np.mean([h["b2"] for h in heads], axis=0),
    }


def predict(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """P(unsafe) = 1 - P(benign) for feature rows, as `Head.probabilities` computes it."""
    hidden = np.maximum(x @ weights["w1"] + weights["b1"], 0.0)
    logits = hidden @ weights["w2"] + weights["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    return 1.0 - probs[:, 0] / probs.sum(axis=1)


def text_scores(weights: dict[str, np.ndarray], x: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """P(unsafe) of each text: that of its worst window, as the classifier scores it."""
    firsts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    return np.maximum.reduceat(predict(weights, x), firsts)


def recall_at(scores: np.ndarray, is_unsafe: np.ndarray, budget: float) -> tuple[float, float]:
    """(recall, threshold) for the lowest threshold refusing at most `budget` of benign."""
    benign = np.sort(scores[~is_unsafe])[::-1]
    allowed = int(np.floor(budget * len(benign)))
    threshold = float(benign[allowed]) + 1e-6 if allowed < len(benign) else 0.0
    return float(np.mean(scores[is_unsafe] >= threshold)), threshold


def false_positives_at(scores: np.ndarray, is_unsafe: np.ndarray, recall: float) -> float:
    """Share of benign refused by the highest threshold that reaches `recall` on unsafe."""
    threshold = np.sort(scores[is_unsafe])[int(np.floor((1 - recall) * is_unsafe.sum()))]
    return float(np.mean(scores[~is_unsafe] >= threshold))


def cross_validate(
    settings: Settings,
    hand: list[Example],
    p_hand: list[Prepared],
    p_synth: list[Prepared],
    y_synth: np.ndarray,
    args,
) -> None:
    """k-fold CV over the hand-written examples; templated ones always stay in training.

    Prints out-of-fold recall at 1.5% and 3% false positives, and recall per category at the
    1.5% threshold. Folds are stratified by class and fixed (seed 0) whatever --seed is.
    With --encoder-epochs N each fold fine-tunes a fresh copy of the encoder layers with
    its head; with 0 the frozen encoder's features are computed once and only heads train.
    """
    y = targets(hand)
    fold = np.zeros(len(y), dtype=int)
    rng = np.random.default_rng(0)
    for c in range(len(CLASSES)):
        members = rng.permutation(np.flatnonzero(y == c))
        fold[members] = np.arange(len(members)) % args.cv
    scores = np.zeros(len(y))
    if not args.encoder_epochs or args.warm_head:
        encoder = float32_encoder(settings, args.layers)
        (x_hand, o_hand), (x_synth, o_synth) = features(encoder, p_hand), features(encoder, p_synth)
    for k in tqdm(range(args.cv), desc="folds", file=sys.stderr):
        train = fold != k
        start = None
        if not args.encoder_epochs or args.warm_head:
            rows = train[o_hand]
            start = fit(
                np.vstack([x_hand[rows], x_synth]),
                np.concatenate([renumber(o_hand[rows]), o_synth + train.sum()]),
                np.concatenate([y[train], y_synth]),
                args.hidden,
                args.epochs,
                args.seed,
                progress=False,
            )
        if args.encoder_epochs:
            tuned = finetune(
                fresh_encoder(settings, args.layers),
                [p for p, t in zip(p_hand, train, strict=True) if t] + p_synth,
                np.concatenate([y[train], y_synth]),
                len(CLASSES),
                args.hidden,
                args.seed,
                args.encoder_epochs,
                head=start,
            )
            head = tuned.head
            if args.refit_head:
                fitted = [p for p, t in zip(p_hand, train, strict=True) if t] + p_synth
                x, owner = features(tuned.encoder, fitted, False)
                y_fit = np.concatenate([y[train], y_synth])
                head = fit(x, owner, y_fit, args.hidden, args.epochs, args.seed, False)
            held = [p for p, t in zip(p_hand, train, strict=True) if not t]
            scores[~train] = text_scores(head, *features(tuned.encoder, held, False))
            continue
        rows = ~train[o_hand]
        scores[~train] = text_scores(start, x_hand[rows], o_hand[rows])
    unsafe = y > 0
    r15, t15 = recall_at(scores, unsafe, 0.015)
    r3, t3 = recall_at(scores, unsafe, 0.03)
    kind = f"encoder fine-tuned {args.encoder_epochs} epochs" if args.encoder_epochs else "frozen"
    kind += ", head trained first on frozen features" if args.warm_head else ""
    kind += ", head retrained on the tuned features" if args.refit_head else ""
    print(f"{args.cv}-fold CV on {len(y)} hand-written (+{len(y_synth)} templated), {kind}:")
    print(f"recall at 1.5% FPR {r15:.3f} (threshold {t15:.3f}), at 3% FPR {r3:.3f} ({t3:.3f})")
    print(f"false positives at 90% recall {false_positives_at(scores, unsafe, 0.90):.3f}")
    if args.save_scores:
        np.save(args.save_scores, scores)
    for c, name in enumerate(CLASSES[1:], 1):
        print(f"  {name:<18} recall {np.mean(scores[y == c] >= t15):.3f}")


def renumber(owner: np.ndarray) -> np.ndarray:
    """Text indices 0, 1, 2... for rows of a subset of texts (rows still grouped by text)."""
    return np.cumsum(np.r_[False, owner[1:] != owner[:-1]])


def float32_encoder(settings: Settings, layers: int, tuned: Path | None = None) -> LeanEncoder:
    """The shared encoder in float32 on the CPU: training's features are the same on every
    machine, whatever precision it serves in."""
    return load_lean_encoder(settings.embedding_model_path(), "cpu", layers, tuned, "float32")


def fresh_encoder(settings: Settings, layers: int) -> LeanEncoder:
    """A float32 copy of the model's first layers, to be fine-tuned in place."""
    import torch

    model = load_encoder(settings.embedding_model_path(), "cpu")
    return LeanEncoder(
        model[0].auto_model, model.tokenizer, layers, torch.device("cpu"), torch.float32
    )


def tune(
    scores: np.ndarray, is_unsafe: np.ndarray, budget: float = MAX_VAL_FALSE_POSITIVES
) -> Thresholds:
    """The refuse threshold with the best recall among those refusing at most `budget` of
    the benign examples.

    One threshold for all categories: validation has 16-32 unsafe examples per category,
    too few to place a threshold per category without fitting its noise.
    """
    candidates = []
    for t in np.round(np.arange(0.05, 0.995, 0.005), 3):
        fp = float(np.mean(scores[~is_unsafe] >= t))
        recall = float(np.mean(scores[is_unsafe] >= t))
        # Within the budget, best recall; else fewest false positives. Ties: higher threshold.
        candidates.append((fp <= budget, recall if fp <= budget else -fp, float(t)))
    refuse = max(candidates)[2]
    return Thresholds(refuse=refuse, caution=round(refuse / 2, 3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=3, help="encoder layers to keep (0 = all)")
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument(
        "--heads", type=int, default=HEADS, help="heads to train and serve as one (mean logits)"
    )
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="head epochs (frozen encoder)")
    parser.add_argument(
        "--encoder-epochs",
        type=int,
        default=ENCODER_EPOCHS,
        help="epochs fine-tuning the encoder layers with the head (0 = frozen encoder)",
    )
    parser.add_argument(
        "--warm-head",
        action="store_true",
        help="fine-tune from a head first trained on the frozen features (with --encoder-epochs)",
    )
    parser.add_argument(
        "--refit-head",
        action=argparse.BooleanOptionalAction,
        default=REFIT_HEAD,
        help="after fine-tuning, train a new head on the tuned encoder's features for --epochs",
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--cv", type=int, default=0, help="only k-fold cross-validate on train.jsonl (k >= 2)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads for training")
    parser.add_argument(
        "--save-scores", type=Path, help="with --cv: save out-of-fold scores (.npy)"
    )
    parser.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="where to write weights")
    parser.add_argument(
        "--head-only",
        action="store_true",
        help="keep the tuned encoder layers in --out and train only a new head on them",
    )
    parser.add_argument(
        "--place-threshold",
        action="store_true",
        help="train nothing: tune the threshold of the weights in --out on validation again",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    # Same seed and thread count -> same weights.
    torch.set_num_threads(args.threads)
    settings = Settings()
    if args.place_threshold:
        val = load_examples(DATA_DIR / "val.jsonl")
        place_threshold(settings, args.out, val, load_val_scripts())
        return 0
    hand = load_examples(DATA_DIR / "train.jsonl")
    synth = load_examples(DATA_DIR / "train_synth.jsonl")
    p_hand, p_synth = prepare_all(hand), prepare_all(synth)
    if args.cv:
        cross_validate(settings, hand, p_hand, p_synth, targets(synth), args)
        return 0
    val = load_examples(DATA_DIR / "val.jsonl")
    y = targets(hand + synth)
    start = time.perf_counter()
    if args.head_only:
        weights, meta = head_on_tuned_layers(settings, args, p_hand + p_synth, y)
    else:
        weights, meta = train_weights(settings, args, p_hand + p_synth, y)
    print(f"trained in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    head = Head(CLASSES, args.layers, Thresholds(0.5, 0.25), **weights)
    head.meta = meta
    head.save(args.out)
    place_threshold(settings, args.out, val, load_val_scripts())
    return 0


def train_weights(
    settings: Settings, args, prepared: list[Prepared], y: np.ndarray
) -> tuple[dict[str, np.ndarray], dict]:
    """The head's weights and settings; the tuned encoder layers, if any, go to --out."""
    meta = {"seed": args.seed, "hidden": args.hidden, "threads": args.threads}
    args.out.mkdir(parents=True, exist_ok=True)
    first = None
    if not args.encoder_epochs or args.warm_head:
        encoder = float32_encoder(settings, args.layers)
        x, owner = features(encoder, prepared)
        if args.encoder_epochs:  # the warm start for fine-tuning: one head
            first = fit(x, owner, y, args.hidden, args.epochs, args.seed)
        else:
            first = fit_heads(x, owner, y, args)
            meta["heads"] = args.heads
        meta["epochs"] = args.epochs
    if args.encoder_epochs:
        tuned = finetune(
            fresh_encoder(settings, args.layers),
            prepared,
            y,
            len(CLASSES),
            args.hidden,
            args.seed,
            args.encoder_epochs,
            head=first,
        )
        save_layers(tuned.encoder, args.out / ENCODER_FILE)
        weights = tuned.head
        if args.refit_head:
            weights = fit_on_layers(settings, args, args.out / ENCODER_FILE, prepared, y)
            meta |= {"epochs": args.epochs, "heads": args.heads}
        meta |= {
            "encoder": ENCODER_FILE,
            "encoder_epochs": args.encoder_epochs,
            "warm_head": args.warm_head,
            "refit_head": args.refit_head,
        }
    else:
        (args.out / ENCODER_FILE).unlink(missing_ok=True)
        weights = first
    return weights, meta


def head_on_tuned_layers(
    settings: Settings, args, prepared: list[Prepared], y: np.ndarray
) -> tuple[dict[str, np.ndarray], dict]:
    """A new head on the tuned encoder layers already in --out, which stay as they are.

    The layers take ~2 h to tune on these CPUs, a head 15-35 min: new training lines reach
    the n-gram weights and the head without the layers being tuned again (see the history
    above ENCODER_EPOCHS for what that bought). weights.json keeps the layers' seed and
    threads; the head's are head_seed and head_threads.
    """
    layers_file = args.out / ENCODER_FILE
    if not layers_file.exists():
        raise SystemExit(
            f"--head-only needs tuned encoder layers at {layers_file}: point --out at weights "
            "that have them, or train without --head-only"
        )
    previous = Head.load(args.out)
    if previous.layers != args.layers:
        raise SystemExit(
            f"the tuned layers in {args.out} are {previous.layers} layers, not --layers "
            f"{args.layers}: pass --layers {previous.layers}"
        )
    weights = fit_on_layers(settings, args, layers_file, prepared, y)
    meta = previous.meta | {
        "hidden": args.hidden,
        "heads": args.heads,
        "epochs": args.epochs,
        "head_seed": args.seed,
        "head_threads": args.threads,
        "head_only": True,
    }
    return weights, meta


def fit_on_layers(
    settings: Settings, args, layers_file: Path, prepared: list[Prepared], y: np.ndarray
) -> dict[str, np.ndarray]:
    """A head trained on the tuned layers as they are served (float16 on disk), not on the
    float32 copy that was tuned."""
    x, owner = features(float32_encoder(settings, args.layers, layers_file), prepared)
    return fit_heads(x, owner, y, args)


def load_val_scripts() -> list[Example]:
    return load_examples(DATA_DIR / "val_scripts.jsonl")


def place_threshold(
    settings: Settings, out: Path, val: list[Example], val_scripts: list[Example] | None = None
) -> None:
    """Tune the refuse threshold of the weights in `out` on `val` (and `val_scripts`), save
    it, print the report.

    The threshold comes from the classifier as it is served (float16 weights, the encoder
    precision this CPU serves, long texts read in windows), not from training features. With
    `val_scripts` it is the lowest that keeps both splits within their budgets: recall rises
    as the threshold falls, so that is the higher of the two thresholds placed alone.
    """
    classifier = SafetyClassifier.load(settings.embedding_model_path(), "cpu", out)
    head = classifier.head
    scores, is_unsafe = served_scores(classifier, val)
    head.thresholds = tune(scores, is_unsafe)
    if val_scripts:
        s_scores, s_unsafe = served_scores(classifier, val_scripts)
        both = tune(s_scores, s_unsafe, MAX_SCRIPTS_FALSE_POSITIVES)
        head.thresholds = max(head.thresholds, both, key=lambda t: t.refuse)
    head.meta["threshold_placed_with"] = classifier.encoder.precision
    head.save_settings(out)
    # Threshold-free numbers, to compare training variants on validation.
    recall = recall_at(scores, is_unsafe, MAX_VAL_FALSE_POSITIVES)[0]
    print(f"validation: recall {recall:.3f} at <= {MAX_VAL_FALSE_POSITIVES:.1%} false positives")
    fp = false_positives_at(scores, is_unsafe, 0.95)
    print(f"validation: false positives {fp:.3f} at 95% recall")
    print(f"thresholds: refuse {head.thresholds.refuse}, caution {head.thresholds.caution}")
    print("== validation (the threshold was tuned on it) ==")
    print(evaluate(val, classifier.check_input, progress=True).format())
    if val_scripts:
        report_scripts(classifier, val_scripts, s_scores, s_unsafe)


def served_scores(
    classifier: SafetyClassifier, examples: list[Example]
) -> tuple[np.ndarray, np.ndarray]:
    """P(unsafe) of each example as served, and which examples are labelled unsafe."""
    scores = classifier.score_many([prepare(e.text) for e in examples])
    return np.array([s.unsafe for s in scores]), np.array([e.label == "unsafe" for e in examples])


def report_scripts(
    classifier: SafetyClassifier, val: list[Example], scores: np.ndarray, is_unsafe: np.ndarray
) -> None:
    """The second validation split's numbers (non-Latin scripts): threshold-free, then at
    the threshold just placed, per writing system."""
    for budget in (MAX_VAL_FALSE_POSITIVES, 0.05):
        recall = recall_at(scores, is_unsafe, budget)[0]
        print(f"non-Latin validation: recall {recall:.3f} at <= {budget:.0%} false positives")
    print("== non-Latin validation (val_scripts.jsonl; the threshold is bounded by it) ==")
    print(evaluate(val, classifier.check_input, progress=True).format())


if __name__ == "__main__":
    sys.exit(main())
