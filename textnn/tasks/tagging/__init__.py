"""Sequence labelling (CoNLL NER, chunking): CoNLL files -> word/char/casing ids -> tag loss, span F1.

Data (`data.format: conll`, read by `textnn.data.conll`): tokens and tags from the columns
`data.token_column` / `data.tag_column`; the files' tags are in `data.tag_scheme` (CoNLL-2003:
iob1). The model learns and decodes in `data.train_tag_scheme` (bioes by default, the IOBES of
Lample et al. 2016, section 2.4; Ratinov & Roth 2009 found it slightly better than IOB); training
tags are converted through their chunks. Evaluation decodes in the training scheme, converts the predictions back to
`data.tag_scheme` and scores them against the file's ORIGINAL tags with conlleval's rules
(`textnn.metrics.spans`), so the numbers are those conlleval prints for the same files.

Model inputs per token:
  words   id in the word vocabulary built from the training tokens (`data.min_freq`,
          `data.max_vocab`; `data.lowercase` lower-cases the word lookup only, as GloVe 6B is
          lower-cased), optionally extended by the words of `data.vectors` (`data.vectors_vocab`)
  chars   ids of the token's first `MAX_WORD_CHARS` characters in ORIGINAL case (0 = padding,
          1 = a character never seen in training)
  casing  a category of the original token's shape (`CASINGS`): Collobert et al. (2011) add a
          capitalisation ("caps") feature to lower-cased words; Reimers & Gurevych (2017) use
          categories like these
Digits are kept as they are in the word lookup (no mapping to 0): the GloVe file holds vectors for
numbers, and the casing feature already marks numeric tokens.

Tags: the complete tag set of the training scheme over the entity types seen in training, 'O'
first (`conll.tag_set`). A dev/test chunk of a type never seen in training cannot be predicted: it
counts as a miss in the scores, is treated as O in the dev loss, and the number of such tokens is
reported when the file is read.

Sub-word encoders (BERT: `Encoder.reads` "segments"): each sentence is read as [CLS] pieces [SEP]
(segment ids all 0), its words split into WordPiece pieces one word at a time (with a rule-based
tokenizer each word is one token of its own vocabulary); the state of the
FIRST piece of each word stands for the word (Devlin et al. 2019 §5.3: "we use the representation of
the first sub-token as the input to the token-level classifier"), so the head, its loss and the
CRF see exactly one position per CoNLL word and the other pieces carry no label. Predictions are
therefore per word and scored as above. A sentence longer than data.max_length pieces is cut; its
words past the cut are tagged from the final [SEP] state and counted in a warning.

Feature-based (`data.features_from: RUN_OR_HF_DIR`, `data.features_layers`): a frozen BERT-family
encoder reads the pieces the same way and its layers at each word's first piece join a word-level
tagger's input (tasks/features.py; Devlin et al. 2019 Table 7). A frozen ELMo reads the words
themselves (their bytes), so no piece mapping is needed (Peters et al. 2018 §3.3).

This package keeps its parts apart: `data.py` reads files into examples and batches, `encoding.py` turns
sentences into ids, `io.py` is what `predict` takes and gives, `model.py` puts the head on an encoder,
`task.py` is the task's own logic (loss, metrics, predictions, report).
"""

from textnn.tasks.tagging.data import CASINGS, TaggingBatch, TaggingData, casing
from textnn.tasks.tagging.model import Tagger, TaggingHeadConfig
from textnn.tasks.tagging.task import TaggingTask

__all__ = ["CASINGS", "Tagger", "TaggingBatch", "TaggingData", "TaggingHeadConfig", "TaggingTask", "casing"]
