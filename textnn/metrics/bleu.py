"""Corpus BLEU and chrF through sacrebleu, on detokenised text against the raw references.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed as sacreBLEU computes them (Post
2018, "A Call for Clarity in Reporting BLEU Scores"): the metric tokenises the plain output and the
untouched reference itself (its default 13a tokenizer, cased), so numbers compare across systems
whatever tokenization each model uses. Each score travels with sacrebleu's signature, the string
that says exactly how it was computed (references, case, tokenizer, smoothing, version).
"""

from __future__ import annotations

from typing import Sequence

from textnn.errors import TextnnError


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """{"bleu", "chrf"} (0-100) of detokenised hypotheses against one reference each, with
    {"bleu_signature", "chrf_signature"}."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise TextnnError(f"{len(hypotheses)} translations for {len(references)} references; every reference "
                          f"needs one translation")
    if not references:
        raise TextnnError("no references to score against; give at least one sentence pair")
    bleu, chrf = BLEU(), CHRF()
    hypotheses, references = list(hypotheses), [list(references)]
    return {"bleu": float(bleu.corpus_score(hypotheses, references).score),
            "chrf": float(chrf.corpus_score(hypotheses, references).score),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}
