"""Language modelling on plain text: token streams -> BPTT windows -> next-token loss, perplexity, bpc.

Data (`data.format: text`): each file is ONE token stream (data/streams.py); `tsv` or `csv` reads the
text column of a table instead, each row's text a line (`data.text_column`, `data.header`, as for
classification): a classifier's own training text, on which ULMFiT fine-tunes its language model
(Howard & Ruder 2018 §3.2) before the classifier starts from it. With `data.tokenizer:
char` every character is a token, newlines included (Karpathy et al. 2015 train on raw characters);
with `word` or `whitespace` each line's tokens are followed by `<eos>`, the end-of-line token of the
PTB and WikiText language models (Mikolov et al. 2010; Merity et al. 2017; PyTorch's
word_language_model); with `bpe` a byte-level BPE of `data.bpe_vocab_size` tokens is trained on
data.train (the tokenizers library) and each line's pieces are followed by `<eos>` in the same way.
The vocabulary comes from the training stream; tokens seen fewer than `data.min_freq` times there
(and every token of dev/test never seen in training) become `<unk>`. A BPE's vocabulary is its own
(byte-level: nothing is unknown). With no data.dev, `data.holdout` keeps the final fraction of the
training stream as dev (nanoGPT's 90/10 Tiny Shakespeare split; vocabulary and BPE from the rest);
with bpe it is the final fraction of the lines, since the BPE that makes the tokens is trained on
exactly the lines before it.

Training, `data.stateful: true` (the default): the training stream is laid out as B =
train.batch_size contiguous rows ([N] -> [B, N/B]) read window by window in order; the task keeps the
recurrent state the model returns and hands it (detached: truncated BPTT, Zaremba et al. 2014) to
the next window, and restarts it at zero at the start of every epoch. `data.bptt_variable: true`
draws each window's length as Merity et al. (2018) §4.1 do and scales that step's learning rate by
length / bptt (`LMBatch.lr_scale`). The carried state (Transformer-XL: its memory) is saved in every
checkpoint (`carried_state`), so a run resumed in the middle of an epoch goes on exactly as if it
had not stopped. Under torchrun (training/distributed.py) P processes lay the stream out as P * B
rows and each reads its own B contiguous rows, carrying their state (each process's is saved).
`data.stateful: false`: independent windows from a random offset, shuffled (both seeded by
(train.seed, epoch)), each from a zero state.

Model: any registered encoder that is causal, gives per-token states and reads nothing beyond the
token ids (`unusable_reason`), with an `LMHead` on top (tied to the encoder's input embedding
when the family ties): `LanguageModel`. `model.init_from: RUN_DIR` starts from another run: its
tokenizer and vocabulary are used as they are (a BPE is not retrained, the vocabulary not rebuilt
from data.train), and its encoder weights are loaded by the caller; from another language model,
its output layer and head options too (`keeps_start_head`), so the run goes on from exactly the
model that run ended with (ULMFiT's language-model fine-tuning).

Evaluation reads the WHOLE stream in order: every token but the first is predicted exactly once,
and the number does not depend on how the stream is cut into batches. An encoder that carries
state (recurrent LMs, NPLM's last ids, Transformer-XL's memory) reads it as ONE row, window after
window, so a token's context is everything before it in the file, as AWD-LSTM reports its test
scores (Merity et al. 2018, test batch size 1). `streams=N` reads N contiguous rows side by side
instead, N times fewer steps, but each row starts from a zero state, so the number depends on N
(docs/RESULTS.md measures both on the WikiText-2 recipes); sequential is the default so that the
reported number is one number, whatever the batch. An encoder that reads each window afresh (`Encoder.windowed`: GPT) is evaluated in
overlapping windows (`SlidingWindows`, data.eval_stride), batched: each target is scored once,
with at least bptt - eval_stride tokens of context after the first window.
Reported: `loss` (mean negative log-likelihood, nats per token), `perplexity` = exp(loss) and
`tokens` (predicted tokens, `<eos>` included); for the char tokenizer `bpc` = loss / ln 2 (bits per
character); for bpe also `word_perplexity` = exp(total nll / words), words = whitespace words + one
`<eos>` per line (less the stream's first, never predicted), so the number compares with word-level
perplexities on the same text.

A bidirectional LM (`Encoder.bidirectional_lm`: ELMo, Peters et al. 2018 §3.1) is trained in both
directions at once (`BidirectionalLanguageModel`): the forward LM predicts each window's targets, carrying
its state as above, and the backward LM predicts its inputs from the words after them, within the
window. The loss is the mean of the two; `forward_perplexity` and `backward_perplexity` (and their
losses) are reported beside it, `perplexity` being exp of the mean loss (their geometric mean).

Output layer (`head:`): the full softmax (`LMHead`) or the adaptive softmax (`AdaptiveLMHead`,
Grave et al. 2017), whose training loss never scores the whole vocabulary; `auto` (the default) is
the family's choice (`Encoder.lm_softmax`: adaptive for elmo, full for the others). The model is handed the
targets and returns the summed loss, so neither training nor evaluation builds [B, T, V] scores
for it; evaluation is exact either way.

This package keeps its parts apart: `data.py` reads files into streams and batches, `building.py` builds
the training stream with its tokenizer and vocabulary, `text.py` turns text into ids and back, `model.py`
puts the head on an encoder, `task.py` is the task's own logic (loss, metrics).
"""

from textnn.data.streams import EOS, LMBatch, WindowBatches
from textnn.tasks.language_modeling.data import EncodedStream, LanguageModelingData
from textnn.tasks.language_modeling.model import (AttentionLanguageModel, BidirectionalLanguageModel, LanguageModel,
                                                  LanguageModelingHead, language_model)
from textnn.tasks.language_modeling.task import LanguageModelingTask

__all__ = ["EOS", "AttentionLanguageModel", "BidirectionalLanguageModel", "EncodedStream", "LMBatch", "LanguageModel",
           "LanguageModelingData", "LanguageModelingHead", "LanguageModelingTask", "WindowBatches", "language_model"]
