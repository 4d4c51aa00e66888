"""Translation: sentence pairs -> an encoder-decoder family with an output layer -> BLEU, chrF, perplexity.

Data (`data.format`): `parallel`, two line-aligned files PREFIX.SRC and PREFIX.TGT per split (`.gz`
too; `data.source` / `data.target` are the language suffixes), or `tsv`, one file with a source and
a target column (`data.source` / `data.target` name them); see data/parallel.py for what is an error
and what is skipped. Text becomes subwords by a byte-level BPE (`data.tokenizer: bpe`, the
`tokenizers` library; Sennrich et al. 2016) of `data.bpe_vocab_size` pieces, trained on the training
pairs: one BPE and vocabulary for both languages (`data.joint_vocab: true`, the Transformer's shared
source-target vocabulary, Vaswani et al. 2017 §5.1, which lets a family share its embeddings and
the output layer, Press & Wolf 2017) or one per language. `word` / `whitespace` / `char` tokenize
by rule, with vocabularies from the training counts (data.min_freq, data.max_vocab). The source
reads its tokens then `</s>`; the target is `<s>` tokens `</s>`, fed without its last token and
predicted without its first (teacher forcing). Training pairs with more than `data.max_length`
tokens on a side (or more than the family reads) are skipped and counted; at evaluation and
translation the source is cut to that length instead (every input is owed an output).

Batches hold `train.batch_size` pairs of similar length, or about `data.batch_tokens` padded tokens
(`token_budget_batches`). The trainer's mean loss is per target token (`</s>` included).

Model: any registered `EncoderDecoder` family (models/base.py) with an `LMHead` over the target
vocabulary on its decoder states, tied to the family's `output_embedding()` when `head.tie` and the
family gives one: `Translator`. `head.teacher_forcing` < 1 feeds, at each target position, the
model's own greedy prediction of the previous step instead of the reference token with
probability 1 - ratio, row by row, running the decoder step by step (Williams & Zipser 1989 call
the reference-fed case teacher forcing; Bengio et al. 2015 feed predictions on a schedule).

Loss: label-smoothed cross-entropy (Szegedy et al. 2016 §7; Vaswani et al. 2017 §5.4, eps 0.1):
(1 - eps) * nll + eps * the mean of -log p over the whole target vocabulary, summed over real target
tokens. Reported (dev, `evaluate`): the UNSMOOTHED `loss` (nats per target token) and `perplexity`,
and, from greedy translations of the sources detokenised into plain text, sacreBLEU's `bleu` and
`chrf` against the raw reference lines, with their signatures (metrics/bleu.py). Decoding a dev set
costs far more than scoring it, so BLEU/chrF are computed at every dev evaluation only when
`train.metric` is bleu or chrf (checkpoints selected by greedy dev BLEU); with the default metric,
perplexity, they are computed for the final evaluation of the best checkpoint (the trainer's pass
with train.bootstrap_samples > 0) and by `textnn evaluate` (greedy, or beam search with --beam).

Decoding (`translate`, `predict`, `evaluate --beam`) goes through generation/decoding.py on the
`Translator` itself (a `Decoder`): start(batch) encodes the source, step feeds target tokens, reorder
follows beam hypotheses. Outputs are at most min(max_tokens, head.max_len_a * S + head.max_len_b) tokens for
a source of S tokens; `<pad>` and `<s>` are never emitted.

This package keeps its parts apart: `data.py` reads files into examples and batches, `text.py` turns text
into ids and back, `decoding.py` decodes, `views.py` draws the attention, `io.py` is what `predict` takes
and gives, `model.py` puts the head on an encoder, `task.py` is the task's own logic (loss, metrics,
predictions).
"""

from textnn.tasks.translation.data import BOS, EOS, EncodedPairs, TranslationBatch, TranslationData
from textnn.tasks.translation.model import TranslationHeadConfig, TranslationOutput, Translator
from textnn.tasks.translation.task import TranslationTask, label_smoothed_nll

__all__ = ["BOS", "EOS", "EncodedPairs", "TranslationBatch", "TranslationData",
           "TranslationHeadConfig", "TranslationOutput", "TranslationTask", "Translator", "label_smoothed_nll"]
