"""The translation task: building its pipelines and splits, the label-smoothed loss, BLEU, chrF and
perplexity, and translations (what they take and give, and how their input reads, are in io.py; text <-> ids
in text.py; greedy / sampling / beam decoding in decoding.py; the attention view in views.py)."""

# B batch (sentence pairs), S source length, T target length, V target vocabulary, D decoder state size

from __future__ import annotations

import sys
from pathlib import Path

import torch

from textnn import registry
from textnn.config import Config
from textnn.data.batching import bucket_batches, token_budget_batches
from textnn.data.parallel import ParallelText, read_parallel
from textnn.data.tokenizers import Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.generation.decoding import DecodingConfig
from textnn.metrics.bleu import corpus_scores
from textnn.models.base import EncoderDecoder, InputSpec
from textnn.modules.heads import LMHead
from textnn.tasks import pipeline
from textnn.tasks.base import EPOCH_SEED_STRIDE, BatchTask, perplexity
from textnn.tasks.checks import refuse_init_from, require_train
from textnn.tasks.translation.data import EncodedPairs, TranslationBatch, TranslationData
from textnn.tasks.translation.decoding import GREEDY_SENTENCES, TranslationDecoding
from textnn.tasks.translation.io import TranslationExample, TranslationIO, TranslationOptions, TranslationPrediction
from textnn.tasks.translation.model import TranslationHeadConfig, Translator
from textnn.tasks.translation.text import TranslationText, text_pipelines
from textnn.tasks.translation.views import AttentionView

DECODE_METRICS = ("bleu", "chrf")


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


class TranslationTask(TranslationIO, TranslationText, TranslationDecoding, AttentionView, BatchTask):
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
        refuse_init_from(config, "translation runs do not start from another run yet; remove model.init_from")

    @property
    def joint(self) -> bool:
        return self.source_vocab is self.target_vocab

    # --- building from data or from a run directory -----------------------------------------------
    @classmethod
    def from_data(cls, config: Config) -> "TranslationTask":
        require_train(config, "the training prefix (parallel) or file (tsv)")
        train = cls._read(config, config.data.train)
        task = cls(config, *text_pipelines(config, train))
        task.splits["train"] = task.encode(train, training=True)
        task.encode_files()
        return task

    @staticmethod
    def _read(config: Config, path: str, fmt: str = "") -> ParallelText:
        data = config.data
        return read_parallel(path, fmt or data.format, data.source, data.target, encoding=data.encoding,
                             header=data.header, skip_bad=data.skip_bad)

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
        results: dict = {"loss": loss, "perplexity": perplexity(loss)}
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
