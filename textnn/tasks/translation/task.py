"""The translation task: building its pipelines and splits, the label-smoothed loss, decoding with
greedy / sampling / beam search, BLEU, chrF and perplexity, translations (what they take and give, and how
their input reads, are in io.py), and the attention view."""

# B batch (sentence pairs), S source length, T target length, V target vocabulary, D decoder state size

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import torch

from textnn import registry
from textnn.config import Config
from textnn.data.batching import bucket_batches, pad, token_budget_batches
from textnn.data.parallel import ParallelText, detokenize_words, read_parallel
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import UNK, Vocab
from textnn.errors import TextnnError
from textnn.limits import MAX_PAIR_TOKENS
from textnn.generation.decoding import DecodingConfig, Hypothesis, decode
from textnn.metrics.bleu import corpus_scores
from textnn.models.base import EncoderDecoder, InputSpec
from textnn.modules.heads import LMHead
from textnn.tasks import pipeline
from textnn.tasks.base import EPOCH_SEED_STRIDE, BatchTask
from textnn.tasks.translation.data import BOS, EOS, SPECIALS, EncodedPairs, TranslationBatch, TranslationData
from textnn.tasks.translation.io import TranslationExample, TranslationIO, TranslationOptions, TranslationPrediction
from textnn.tasks.translation.model import TranslationHeadConfig, Translator
from textnn.training.progress import progress_bar

DECODE_METRICS = ("bleu", "chrf")
MAX_OUTPUT_TOKENS = 256  # a hard cap on an output, whatever max_len_a * S + b allows
# Sentences decoded side by side, unless a command's --batch-size says (`Task.inference_batch_size`)
GREEDY_SENTENCES = 128  # greedy, sampling
BEAM_SENTENCES = 32  # beam search (each K rows)


def label_smoothed_nll(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, epsilon: float
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(smoothed loss, plain nll), each summed over the real targets (mask True).

    The target distribution is (1 - eps) on the reference token plus eps spread evenly over all V
    tokens (Szegedy et al. 2016 §7), so the loss per token is (1 - eps) * -log p(y) + eps * mean_v
    -log p(v); with eps = 0 both returns are the same.
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, T, 1] -> [B, T]
    nll = nll.masked_fill(~mask, 0.0)
    if not epsilon:
        return nll.sum(), nll.sum()
    uniform = -log_probs.mean(dim=-1).masked_fill(~mask, 0.0)  # [B, T]
    return ((1.0 - epsilon) * nll + epsilon * uniform).sum(), nll.sum()


class TranslationTask(TranslationIO, BatchTask):
    """Sentence-pair translation in the trainer's task protocol (see the module docstring)."""

    capabilities = frozenset({"translate_lines", "write_views"})
    Example = TranslationExample
    Prediction = TranslationPrediction
    Options = TranslationOptions

    data_config = TranslationData
    head_config = TranslationHeadConfig
    formats = ("parallel", "tsv")
    metric_directions = {"loss": False, "perplexity": False, "bleu": True, "chrf": True}
    default_metric = "perplexity"
    metric_note = ("dev metrics: loss and perplexity (unsmoothed) at every evaluation, the cheap default "
                   "(train.metric: perplexity); train.metric: bleu (or chrf) selects checkpoints by sacreBLEU of "
                   "greedy dev translations, decoding the dev set at every evaluation; otherwise BLEU and chrF are "
                   "computed for the final evaluation (train.bootstrap_samples > 0) and by `textnn evaluate`")

    def __init__(self, config: Config, tokenizers: tuple[Tokenizer, Tokenizer], vocabs: tuple[Vocab, Vocab]):
        self.config = config
        self.source_tokenizer, self.target_tokenizer = tokenizers
        self.source_vocab, self.target_vocab = vocabs
        self.splits: dict[str, EncodedPairs] = {}

    # --- what the task can use ----------------------------------------------------------------------
    @classmethod
    def unusable_reason(cls, encoder_cls: type) -> str | None:
        if not issubclass(encoder_cls, EncoderDecoder):
            return "translation needs an encoder-decoder family (it reads a source and writes a target)"
        return None

    @classmethod
    def check_config(cls, config: Config) -> None:
        super().check_config(config)
        if config.init_from:
            raise TextnnError("config key model.init_from: translation runs do not start from another run yet; "
                              "remove model.init_from")

    @property
    def joint(self) -> bool:
        return self.source_vocab is self.target_vocab

    def _length_limit(self) -> int:
        """Most tokens per side before </s> (or after <s>): data.max_length and the family's own limit, and
        without either the input-size policy's limit on a sentence (textnn/limits.py)."""
        family = registry.encoder_class(self.config.model_name).max_length(self.config.model)
        limits = [n for n in (self.config.data.max_length, family - 1 if family else 0) if n > 0]
        return min(limits) if limits else MAX_PAIR_TOKENS

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "TranslationTask":
        data = config.data
        if not data.train:
            raise TextnnError("config key data.train is empty; set it to the training prefix (parallel) or file (tsv)")
        train = cls._read(config, data.train)
        tokenizers, vocabs = cls._text_pipeline(config, train)
        task = cls(config, tokenizers, vocabs)
        task.splits["train"] = task.encode(train, training=True)
        for split in ("dev", "test"):
            path = getattr(data, split)
            if path:
                task.splits[split] = task.encode_file(path)
        return task

    @staticmethod
    def _read(config: Config, path: str, fmt: str = "") -> ParallelText:
        data = config.data
        return read_parallel(path, fmt or data.format, data.source, data.target, encoding=data.encoding,
                             header=data.header, skip_bad=data.skip_bad)

    @staticmethod
    def _text_pipeline(config: Config, train: ParallelText) -> tuple[tuple[Tokenizer, Tokenizer], tuple[Vocab, Vocab]]:
        """Tokenizers and vocabularies from the training pairs: joint (the same objects twice) or one per side."""
        data = config.data
        sides = [train.source + train.target] if data.joint_vocab else [train.source, train.target]
        pipelines = []
        for lines in sides:
            if data.tokenizer == "bpe":
                tokenizer = Tokenizer.train_bpe(lines, data.bpe_vocab_size, SPECIALS, data.lowercase)
                vocab = Vocab(tokenizer.vocabulary())
            else:
                tokenizer = Tokenizer(data.tokenizer, data.lowercase)
                vocab = Vocab.build(tokenizer.tokenize_lines(lines), min_freq=data.min_freq,
                                    max_size=data.max_vocab, specials=SPECIALS)
            pipelines.append((tokenizer, vocab))
        (src_tok, src_vocab), (tgt_tok, tgt_vocab) = pipelines[0], pipelines[-1]
        return (src_tok, tgt_tok), (src_vocab, tgt_vocab)

    @classmethod
    def from_run(cls, run_path: Path, config: Config) -> "TranslationTask":
        source = cls.load_text_pipeline(run_path, config.data)
        if config.data.joint_vocab:
            return cls(config, (source[0], source[0]), (source[1], source[1]))
        target = (Tokenizer.load(run_path / "target_tokenizer.json"),
                  Vocab.load(run_path / "target_vocab.json"))
        return cls(config, (source[0], target[0]), (source[1], target[1]))

    def save(self, run_path: Path) -> None:
        """tokenizer.json + vocab.json (the source side, or both under a joint vocabulary) and, per
        language, target_tokenizer.json + target_vocab.json."""
        sides = [("", self.source_tokenizer, self.source_vocab)]
        if not self.joint:
            sides.append(("target_", self.target_tokenizer, self.target_vocab))
        for prefix, tokenizer, vocab in sides:
            pipeline.save(run_path, tokenizer, vocab, prefix)

    def build_model(self) -> Translator:
        source = InputSpec(vocab_size=len(self.source_vocab), pad_id=self.source_vocab.pad_id)
        target = source if self.joint else InputSpec(vocab_size=len(self.target_vocab), pad_id=self.target_vocab.pad_id)
        family = registry.encoder_class(self.config.model_name)(self.config.model, source, target)
        head_cfg = self.config.head
        tied = family.output_embedding() if head_cfg.tie else None
        head = LMHead(family.token_size, len(self.target_vocab), tied=tied, bias=family.lm_bias)
        return Translator(family, head, head_cfg.teacher_forcing)

    # --- text <-> ids -------------------------------------------------------------------------------
    def source_ids(self, lines: list[str]) -> list[list[int]]:
        """Ids of source sentences as the encoder reads them: tokens then </s>."""
        eos = self.source_vocab.stoi[EOS]
        return [self.source_vocab.encode(tokens) + [eos] for tokens in self.source_tokenizer.tokenize_lines(lines)]

    def target_ids(self, lines: list[str]) -> list[list[int]]:
        """Ids of target sentences: <s> tokens </s>."""
        bos, eos = self.target_vocab.stoi[BOS], self.target_vocab.stoi[EOS]
        return [[bos, *self.target_vocab.encode(tokens), eos]
                for tokens in self.target_tokenizer.tokenize_lines(lines)]

    def detokenize(self, ids: list[int]) -> str:
        """Plain text of output ids (specials dropped): BPE pieces decode to the exact text; words are joined
        with the spaces before punctuation removed."""
        specials = {self.target_vocab.stoi[s] for s in SPECIALS if s != UNK and s in self.target_vocab.stoi}
        tokens = self.target_vocab.decode(i for i in ids if i not in specials)
        if self.target_tokenizer.kind == "word":
            return detokenize_words(tokens)
        # A BPE output may begin with a piece made for mid-sentence (" the"): lines carry no outer spaces.
        return self.target_tokenizer.join(tokens).strip()

    def source_labels(self, ids: list[int]) -> list[str]:
        return [self._piece(self.source_tokenizer, self.source_vocab, i) for i in ids]

    def target_labels(self, ids: list[int]) -> list[str]:
        return [self._piece(self.target_tokenizer, self.target_vocab, i) for i in ids]

    @staticmethod
    def _piece(tokenizer: Tokenizer, vocab: Vocab, index: int) -> str:
        token = vocab.itos[index]
        if tokenizer.kind != "bpe" or token in SPECIALS:
            return token
        return tokenizer.join([token])  # "Ġdog" -> " dog"

    def encode(self, pairs: ParallelText, training: bool = False) -> EncodedPairs:
        """Ids of a split. Training drops pairs longer than the limit (counted); others cut the source."""
        source, target = self.source_ids(pairs.source), self.target_ids(pairs.target)
        limit = self._length_limit()
        references = list(pairs.target)
        if limit:
            long = [i for i, (s, t) in enumerate(zip(source, target)) if len(s) - 1 > limit or len(t) - 2 > limit]
            if long and training:
                print(f"warning: {pairs.origin}: skipped {len(long)} of {len(source):,} training pairs with more than "
                      f"{limit} tokens on a side (lines {', '.join(str(pairs.lines[i]) for i in long[:5])}"
                      f"{', ...' if len(long) > 5 else ''})", file=sys.stderr)
                keep = sorted(set(range(len(source))) - set(long))
                if not keep:
                    raise TextnnError(f"{pairs.origin}: every training pair is longer than {limit} tokens on a side; "
                                      f"raise data.max_length")
                source, target = [source[i] for i in keep], [target[i] for i in keep]
                references = [references[i] for i in keep]
            elif long:
                print(f"warning: {pairs.origin}: {len(long)} pair(s) longer than {limit} tokens are cut to "
                      f"{limit} for scoring and translation", file=sys.stderr)
                source = [s[:limit] + s[-1:] if len(s) - 1 > limit else s for s in source]
                target = [t[:limit + 1] + t[-1:] if len(t) - 2 > limit else t for t in target]
        return EncodedPairs(source, target, references, pairs.origin, self.source_vocab.pad_id,
                            self.target_vocab.pad_id)

    def encode_file(self, path: str, require_labels: bool = True) -> EncodedPairs:
        """A split read with the run's data settings; `path` is a prefix (parallel) or a TSV file
        (a file that exists as named is read as TSV whatever data.format says)."""
        fmt = "tsv" if Path(path).is_file() else "parallel"
        return self.encode(self._read(self.config, path, fmt))

    # --- batches ----------------------------------------------------------------------------------
    def _order(self, data: EncodedPairs, shuffle: bool, seed: int = 0) -> list[list[int]]:
        """Batches of pair indices: for training (`shuffle`) or for scoring; a command's --batch-size
        (`inference_batch_size`) sets the pairs of a scoring batch, whatever data.batch_tokens says."""
        lengths = data.lengths()
        if self.config.data.batch_tokens and (shuffle or not self.inference_batch_size):
            return token_budget_batches(lengths, self.config.data.batch_tokens, shuffle, seed)
        if shuffle:
            size = self.config.train.batch_size
        else:
            size = pipeline.eval_batch_size(self.config, self.inference_batch_size)
        return bucket_batches(lengths, size, shuffle, seed)

    def train_order(self, epoch: int) -> list[list[int]]:
        """Length-bucketed batches, of data.batch_tokens tokens when set, else of train.batch_size pairs."""
        return self._order(self.splits["train"], shuffle=True, seed=self.config.train.seed * EPOCH_SEED_STRIDE + epoch)

    # --- loss and evaluation ----------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: TranslationBatch) -> torch.Tensor:
        """Label-smoothed cross-entropy summed over the batch's target tokens."""
        logits = model(batch.src_ids, batch.src_mask, batch.tgt_in, batch.tgt_mask).logits
        return label_smoothed_nll(logits, batch.tgt_out, batch.tgt_mask, self.config.head.label_smoothing)[0]

    def decoding_config(self, requested: DecodingConfig | None = None) -> DecodingConfig:
        """The decoding a command asked for (built and checked by `DecodingConfig.from_flags`; default
        greedy) under the head's length rule: at most min(MAX_OUTPUT_TOKENS, a * S + b) tokens."""
        head = self.config.head
        return replace(requested or DecodingConfig(), max_tokens=MAX_OUTPUT_TOKENS, max_len_a=float(head.max_len_a),
                       max_len_b=head.max_len_b)

    @torch.no_grad()
    def translate_ids(self, model: Translator, sources: list[list[int]], decoding: DecodingConfig,
                      progress: bool = False) -> list[list[Hypothesis]]:
        """Hypotheses (best first) for each source id list, decoded in batches of similar length; with
        `progress`, a bar counts the sentences (a dev set under beam search takes minutes)."""
        model.eval()
        device = next(model.parameters()).device
        size = self.inference_batch_size or (BEAM_SENTENCES if decoding.search.rows_per_input(decoding) > 1
                                             else GREEDY_SENTENCES)
        order = bucket_batches([len(s) for s in sources], size, shuffle=False)
        bos, eos = self.target_vocab.stoi[BOS], self.target_vocab.stoi[EOS]
        banned = [self.target_vocab.pad_id, bos]
        found: list[list[Hypothesis]] = [[] for _ in sources]
        with progress_bar("decode", "sentence", total=len(sources), enabled=progress, leave=False) as bar:
            for index in order:
                src_ids, src_mask = pad([sources[i] for i in index], self.source_vocab.pad_id)
                batch = TranslationBatch(src_ids, src_mask, src_ids[:, :0], src_ids[:, :0], src_mask[:, :0],
                                         index).to(device)
                prefix = torch.full((len(index), 1), bos, dtype=torch.long, device=device)  # [B, 1]
                lengths = src_mask.sum(dim=1)  # [B]
                for i, hypotheses in zip(index, decode(model, batch, prefix, decoding, stop_ids=[eos],
                                                       source_lengths=lengths, banned_ids=banned)):
                    found[i] = hypotheses
                bar.update(len(index))
        return found

    def translate_lines(self, model: Translator, lines: list[str], decoding: DecodingConfig) -> list[list[tuple[str, float]]]:
        """(text, score) of each line's hypotheses, best first; an empty line translates to ""."""
        kept = [i for i, line in enumerate(lines) if line.strip()]
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
        if not kept:
            return out
        sources = self.encode_sources([lines[i] for i in kept])
        for i, hypotheses in zip(kept, self.translate_ids(model, sources, decoding)):
            out[i] = [(self.detokenize(h.tokens), h.score) for h in hypotheses]
        return out

    def encode_sources(self, lines: list[str]) -> list[list[int]]:
        """Source ids for translation, cut to the length limit (keeping </s>)."""
        limit = self._length_limit()
        return [s[:limit] + s[-1:] if limit and len(s) - 1 > limit else s for s in self.source_ids(lines)]

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, split: str | EncodedPairs, bootstrap_samples: int = 0,
                 decoding: DecodingConfig | None = None) -> dict:
        """Unsmoothed loss (nats per target token) and perplexity; BLEU and chrF (with signatures) when
        `decoding` is given, or greedily when train.metric is bleu/chrf or `bootstrap_samples` > 0 (the
        trainer's final evaluation; see the module docstring). No confidence interval is computed."""
        data = self.splits[split] if isinstance(split, str) else split
        model.eval()
        device = next(model.parameters()).device
        total, count = torch.zeros((), dtype=torch.float64, device=device), 0
        for batch in (data.collate(index) for index in self._order(data, shuffle=False)):
            batch = batch.to(device)
            logits = model(batch.src_ids, batch.src_mask, batch.tgt_in, batch.tgt_mask).logits
            total += label_smoothed_nll(logits, batch.tgt_out, batch.tgt_mask, 0.0)[1].double()
            count += batch.count
        loss = float(total) / count
        results: dict = {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf")}
        if decoding is None and (self.config.train.metric in DECODE_METRICS or bootstrap_samples > 0):
            decoding = self.decoding_config()
        if decoding is not None:
            hypotheses = self.translate_ids(model, data.source, decoding, progress=self.config.train.progress)
            results.update(corpus_scores([self.detokenize(h[0].tokens) for h in hypotheses], data.references))
            results["decoding"] = decoding.search.describe(decoding)
        results.update(tokens=count, sentences=len(data.source))
        return results

    def evaluate_file(self, model: torch.nn.Module, path: str, bootstrap_samples: int = 0,
                      options: TranslationOptions | None = None) -> dict:
        """`textnn evaluate`: always decodes (greedy, or as options.decoding says)."""
        decoding = self.decoding_config(options.decoding if options is not None else None)
        return self.evaluate(model, self.encode_file(path), bootstrap_samples=bootstrap_samples, decoding=decoding)

    # --- commands -----------------------------------------------------------------------------------
    def predict(self, model: Translator, examples: list[TranslationExample], options: TranslationOptions
                ) -> list[TranslationPrediction]:
        """The hypotheses of each source (best first) and their scores, decoded as options.decoding says
        (default greedy): the best alone, or its n-best list (n_best > 1)."""
        found = self.translate_lines(model, [e.source for e in examples], self.decoding_config(options.decoding))
        return [TranslationPrediction(source=e.source, hypotheses=[text for text, _ in hypotheses],
                                      scores=[float(score) for _, score in hypotheses])
                for e, hypotheses in zip(examples, found)]

    def predict_chunk_size(self) -> int:
        return max(GREEDY_SENTENCES, self.inference_batch_size or 0)  # a part fills at least one batch

    def report_sections(self, metrics: dict, split: str, run_path: Path) -> list[str]:
        """The sacreBLEU signatures behind the split's BLEU and chrF."""
        return [f"- {name} signature ({metrics.get('decoding', 'greedy')}): `{metrics[key]}`"
                for name, key in (("BLEU", "bleu_signature"), ("chrF", "chrf_signature")) if key in metrics] + [""]

    # --- the attention view -------------------------------------------------------------------------
    @torch.no_grad()
    def write_views(self, model: Translator, text: str, output_dir: Path, title: str) -> list[Path]:
        """The source x target attention of the first non-empty line of `text`, translated greedily:
        one PNG for a single attention (RNN families), one per layer with a panel per head (Transformer)."""
        from textnn.viz.attention import plot_source_attention

        line = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if not line:
            raise TextnnError("no text to translate: give a source sentence with --text or a file")
        source = self.encode_sources([line])[0]
        hypothesis = self.translate_ids(model, [source], self.decoding_config())[0][0]
        bos, eos = self.target_vocab.stoi[BOS], self.target_vocab.stoi[EOS]
        target = [bos, *hypothesis.tokens]
        device = next(model.parameters()).device
        tensor = lambda ids: torch.tensor([ids], dtype=torch.long, device=device)  # noqa: E731
        out = model(tensor(source), tensor(source) >= 0, tensor(target), tensor(target) >= 0, need_weights=True)
        if not out.attention:
            raise TextnnError(f"model {self.config.model_name} has no source attention to draw (a seq2seq without "
                              f"attention reads one summary vector); train it with an attention score")
        rows = self.target_labels(hypothesis.tokens + [eos])  # row t: the decoder predicting output token t
        columns = self.source_labels(source)
        output_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name, weights in out.attention.items():
            weights = weights[0].float().cpu()  # [T, S] or [H, T, S]
            heads = weights if weights.dim() == 3 else weights[None]  # -> [H, T, S]
            written.append(plot_source_attention(heads.numpy(), columns, rows, output_dir / f"attention_{name}.png",
                                                 f"{title}: {name}"))
        print(f"source: {line}\ntranslation: {self.detokenize(hypothesis.tokens)}", file=sys.stderr)
        return written
