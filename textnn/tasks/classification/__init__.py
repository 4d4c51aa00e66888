"""Text classification, single sentence or sentence pair: data -> batches, loss, metrics, predictions.

The head (`modules.heads`) goes on any encoder that gives a sentence vector, or per-token states
that `head.pooling` turns into one (a language model's, say). A sentence pair is read by the same
encoder one sentence at a time and classified from [u; v; |u - v|; u * v] (Conneau et al. 2017
§3.1, `PairClassifierHead`); a single-sentence run has no pair layer at all.

Encoders that read "segments" (BERT) read every input as ONE sequence instead: [CLS] a [SEP], or
a pair packed as [CLS] a [SEP] b [SEP] with segment ids (data/packing.py; Devlin et al. 2019 §4.1),
truncated longest-first to data.max_length, and classified from the encoder's sentence vector
(its pooler) with a plain `ClassifierHead`.

Feature-based (`data.features_from: RUN_DIR`, an ELMo run; tasks/features.py): the frozen encoder's
layers over each word, combined as `data.features_layers` says (a learned scalar mix: Peters et al.
2018 §3.2-3.3), join the word embeddings of an encoder that takes them (`Encoder.takes_context`: the
BiLSTM and CNN classifiers). ELMo reads whole words, so the run's own tokens are its input.

ULMFiT (Howard & Ruder 2018 §3.3) on a language model's encoder: `head.pooling: concat` reads
[h_T; max; mean] of its states; `head.batch_norm`, `head.hidden: 50`, `head.activation: relu` and
`head.hidden_dropout` make the two batch-normed linear blocks; `head.bptt` reads a long input in
windows with the state carried (BPT3C, `Classifier.windowed_states`). Gradual unfreezing,
discriminative and slanted triangular rates are train options (training/optim.py).

Regression (`data.regression: true`, STS-B's similarity scores): the label column holds real
numbers; a `RegressionHead` gives one value per input, trained with the squared error and scored
by Pearson's and Spearman's correlation (GLUE's STS-B metrics) and the mean squared error.

This package keeps its parts apart: `data.py` reads files into examples and batches, `building.py` draws
the rows a run trains, selects and evaluates on, `encoding.py` turns them into ids, `io.py` is what
`predict` takes and gives (typed) and how its input reads, `model.py` puts the head on an encoder,
`report.py` is its part of the report, and `task.py` is the task's own logic (loss, metrics, predictions).
"""

from textnn.tasks.classification.data import ClassificationBatch, ClassificationData, EncodedTexts
from textnn.tasks.classification.io import ClassificationExample, ClassificationPrediction, RegressionPrediction
from textnn.tasks.classification.model import Classifier, ClassificationHeadConfig, classifier_head
from textnn.tasks.classification.task import ClassificationTask

__all__ = ["ClassificationBatch", "ClassificationData", "ClassificationExample", "ClassificationHeadConfig",
           "ClassificationPrediction", "ClassificationTask", "Classifier", "EncodedTexts", "RegressionPrediction",
           "classifier_head"]
