"""Extractive question answering (SQuAD v1.1): the answer is a span of the context.

Devlin et al. 2019 §4.2: the question and the context are packed as [CLS] question [SEP] context
[SEP] (segments 0 / 1); `SpanHead` gives each token a start and an end score, and the answer is the
span (s, e) of context tokens with s <= e, at most `data.max_answer_length` tokens long, that
maximises start[s] + end[e]. Training maximises the log-likelihood of the gold start and end.

Long contexts (BERT's run_squad.py): a context longer than the room left beside the question
(data.max_length - question - 3) is read in windows that start every `data.doc_stride` tokens, the
last one reaching the end, so every context token is in some window. A window that does not hold the
whole gold answer is trained to point at [CLS] (position 0), as the released code does; at
prediction time the best span over all of a question's windows is taken.

Answers map back to text by character offsets: each word piece keeps the characters it came from
(`Tokenizer.encode_with_offsets`), and the answer is the context's characters from the start of the
first piece to the end of the last, so its spelling, case and spacing are the original's.

Data (`data.format: squad`): the SQuAD JSON (`{"data": [{"title", "paragraphs": [{"context", "qas":
[{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}`). An answer whose `answer_start`
does not point at its text in the context is counted and reported (`answers_outside_context`); a
training question left with no usable answer is not trained on. Scores (metrics/squad.py): the
official exact match and F1, each the best over a question's reference answers.

Only the SQuAD v1.1 dev set may be at hand: `data.holdout_articles: N` with no data.dev keeps the
last N articles of data.train as the dev set (the recipe: 38 of the 48 dev articles to fine-tune, the
other 10 to evaluate).

This package keeps its parts apart: `data.py` reads files into examples and batches, `io.py` is what
`predict` takes and gives, `model.py` puts the head on an encoder, `task.py` is the task's own logic (loss,
metrics, predictions); the WordPiece pipeline and window checks it shares with pre-training are
tasks/windows.py.
"""

from textnn.tasks.qa.data import QABatch, QAData, Question, answer_pieces, read_squad, window_starts
from textnn.tasks.qa.model import SpanModel, SpanOutput
from textnn.tasks.qa.task import QATask, best_span

__all__ = ["QABatch", "QAData", "QATask", "Question", "SpanModel", "SpanOutput", "answer_pieces", "best_span",
           "read_squad", "window_starts"]
