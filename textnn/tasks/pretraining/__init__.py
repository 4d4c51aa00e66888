"""BERT pre-training: masked language modelling (MLM) and next-sentence prediction (NSP).

Devlin et al. 2019 §3.1: the encoder reads [CLS] A [SEP] B [SEP] in which 15% of the positions were
chosen for prediction (80% [MASK], 10% a random token, 10% unchanged) and predicts the original
tokens there (MLM, through `MLMHead`, whose output layer is the encoder's token embedding, tied as
in the released code); from the pooled [CLS] vector it predicts whether B followed A in the document
(NSP, a linear layer on the pooler, the released code's `cls/seq_relationship`). How documents,
pairs and masks are made is data/masking.py.

RoBERTa's variant (Liu et al. 2019 §4.1-4.2): `data.dynamic_masking: true` draws new masks every
epoch instead of once; `data.nsp: false` drops NSP and packs full sentences across documents.

Data (`data.format: text`): a plain text file, blank lines between documents, or WikiText with its
` = Title = ` article headings as document boundaries (`data.documents: wikitext`). The tokenizer is
a WordPiece trained on data.train (`data.wordpiece_vocab_size`), or that of model.init_from.

Metrics: `mlm_loss` (mean cross-entropy over the predicted positions, nats), `mlm_accuracy`,
`nsp_loss`, `nsp_accuracy`, and `loss` = mlm_loss + nsp_loss (the training objective). Dev pairs and
masks are drawn once (seed, epoch 0), so dev numbers compare across evaluations and runs.
The run directory holds the encoder (`encoder.*`) and the WordPiece vocabulary: a classification,
tagging or qa run starts from it with `model.init_from: RUN_DIR`.

This package keeps three things apart: `data.py` reads files into examples and batches, `model.py`
puts the head on an encoder, `task.py` is the task's own logic (loss, metrics); the WordPiece pipeline and
window checks it shares with span QA are tasks/windows.py.
"""

from textnn.tasks.pretraining.data import PretrainingBatch, PretrainingData, PretrainingSplit
from textnn.tasks.pretraining.model import Pretrainer, PretrainingHead, PretrainingOutput
from textnn.tasks.pretraining.task import PretrainingTask, pretraining_metrics, sequence_losses

__all__ = ["PretrainingBatch", "PretrainingData", "PretrainingHead", "PretrainingOutput", "PretrainingSplit",
           "PretrainingTask", "Pretrainer", "pretraining_metrics", "sequence_losses"]
