"""Speed: our `bert` encoder against transformers' BertModel with the same config, weights and inputs.

Both models are built from one BertConfig and hold the same weights (ours exported to BertModel's
names, interop/huggingface.py), so they compute the same function: the script checks that their
states agree before timing. Two input sets:

- **bucketed**: SST-2 dev sentences (`--data`, default ../shared/data/sst2; WordPiece-tokenized, [CLS] s [SEP]),
  sorted by length and cut into batches, each padded to its longest sentence (what a classifier
  run feeds the encoder); random lengths of the same spread when the data is absent;
- **fixed128**: random ids, every sequence 128 tokens, no padding.

Measured per input set, interleaving the two models, with the CPU time of the compute thread on a
CPU with one torch thread (so other processes on a shared machine do not count; wall-clock time on
a GPU or with several threads):
inference sentences/s (eval mode, no gradients) and the time of one training step (train mode,
dropout on, a linear head on the pooler, cross-entropy, backward, AdamW). The AdamW is torch's fused one
on both sides, the optimizer each library's trainer builds: ours (training/optim.py) and transformers'
Trainer (its default `adamw_torch_fused` since torch 2.8). Printed as
`ratio=<ours/theirs>` in throughput, so above 1 means ours is faster. On CUDA both run under bf16
autocast.

    python benchmarks/bert_vs_hf.py                          # BERT-Mini (4 x 256) on CPU, one thread
    python benchmarks/bert_vs_hf.py --preset tiny --batches 2 --repeats 1   # a quick check that it runs
    python benchmarks/bert_vs_hf.py --preset base --device cuda --batches 50
"""

# B batch, T sequence length, V vocabulary, C classes

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F
from machine import device_info, interleaved_medians, pick_clock  # benchmarks/machine.py

from textnn.interop.huggingface import bert_to_hf
from textnn.models.base import InputSpec, TokenFeatures
from textnn.models.bert import PRESETS, Bert

def bucketed_batches(data: Path, batch_size: int, count: int, vocab_size: int, seed: int) -> list[torch.Tensor]:
    """SST-2 dev sentences (in `data`) as WordPiece ids, sorted by length, `count` batches of `batch_size`."""
    generator = torch.Generator().manual_seed(seed)
    dev, train = data / "dev.tsv", data / "train.tsv"
    if dev.is_file() and train.is_file():
        from textnn.data.tokenizers import Tokenizer

        sentences = [line.split("\t")[0] for line in dev.read_text(encoding="utf-8").splitlines()[1:]]
        corpus = [line.split("\t")[0] for line in train.read_text(encoding="utf-8").splitlines()[1:]]
        tokenizer = Tokenizer.train_wordpiece(corpus, vocab_size, lowercase=True)
        table = {t: i for i, t in enumerate(tokenizer.vocabulary())}
        rows = [[2, *(table[t] for t in tokenizer(s)), 3] for s in sentences]  # [CLS] s [SEP]
        print(f"inputs: SST-2 dev, {len(rows)} sentences, WordPiece of {len(table)} pieces")
    else:
        lengths = torch.randint(5, 60, (batch_size * count,), generator=generator).tolist()
        rows = [torch.randint(5, vocab_size, (n,), generator=generator).tolist() for n in lengths]
        print(f"inputs: {data} has no SST-2 train.tsv and dev.tsv, random sentences of 5-60 tokens")
    rows.sort(key=len)
    step = max(1, len(rows) // (batch_size * count)) if len(rows) > batch_size * count else 1
    rows = rows[::step][: batch_size * count]
    batches = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        ids = torch.zeros(len(chunk), max(map(len, chunk)), dtype=torch.long)  # [B, T], 0 = [PAD]
        for row, seq in enumerate(chunk):
            ids[row, : len(seq)] = torch.tensor(seq)
        batches.append(ids)
    return batches


def build(preset: str, vocab_size: int, device: torch.device):
    from transformers import BertConfig as HFConfig, BertModel

    cfg = PRESETS[preset].options()
    torch.manual_seed(0)
    ours = Bert(cfg, InputSpec(vocab_size, 0)).to(device)
    state, hf_config = bert_to_hf(cfg, {k: v.detach().cpu() for k, v in ours.state_dict().items()}, vocab_size, 0)
    theirs = BertModel(HFConfig(**hf_config)).to(device)
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in name for name in missing), (missing, unexpected)
    return cfg, ours, theirs


def our_forward(model, ids):
    out = model(ids, ids != 0, features=TokenFeatures(segments=torch.zeros_like(ids)))
    return out.tokens, out.sentence


def their_forward(model, ids):
    out = model(input_ids=ids, attention_mask=(ids != 0).long(), token_type_ids=torch.zeros_like(ids))
    return out.last_hidden_state, out.pooler_output


@torch.no_grad()
def difference(batches, ours, theirs) -> float:
    """max |ours - theirs| over the real positions' states and the pooler, in float32 eval mode."""
    ours.eval(), theirs.eval()
    worst = 0.0
    for ids in batches:
        a, b = our_forward(ours, ids), their_forward(theirs, ids)
        worst = max(worst, (a[0] - b[0])[ids != 0].abs().max().item(), (a[1] - b[1]).abs().max().item())
    return worst


def measure(name, batches, ours, theirs, d_model, device, repeats, autocast) -> None:
    """Time both models on `batches` (training steps change their weights: check equality before)."""
    sentences = sum(b.size(0) for b in batches)
    print(f"[{name}] {len(batches)} batches, {sentences} sentences")

    def infer(model, forward):
        def run():
            with torch.no_grad(), autocast():
                for ids in batches:
                    forward(model, ids)
        return run

    heads = {}
    optimizers = {}
    for key, model in (("ours", ours), ("theirs", theirs)):
        torch.manual_seed(1)
        heads[key] = torch.nn.Linear(d_model, 2).to(device)
        optimizers[key] = torch.optim.AdamW([*model.parameters(), *heads[key].parameters()], lr=1e-5,
                                            fused=device.type in ("cpu", "cuda"))
    labels = [torch.randint(0, 2, (b.size(0),), device=device) for b in batches]

    def train(model, forward, key):
        def run():
            for ids, gold in zip(batches, labels):
                with autocast():
                    logits = heads[key](forward(model, ids)[1])  # [B, D] -> [B, C]
                loss = F.cross_entropy(logits.float(), gold)
                optimizers[key].zero_grad(set_to_none=True)
                loss.backward()
                optimizers[key].step()
        return run

    for mode in ("inference", "training"):
        for model in (ours, theirs):
            model.train(mode == "training")
        runs = {key: infer(model, forward) if mode == "inference" else train(model, forward, key)
                for key, model, forward in (("ours", ours, our_forward), ("theirs", theirs, their_forward))}
        medians = interleaved_medians(runs, repeats, device)
        ours_s, theirs_s = medians["ours"], medians["theirs"]
        if mode == "inference":
            print(f"  inference: ours {sentences / ours_s:,.1f} sentences/s, theirs {sentences / theirs_s:,.1f} "
                  f"sentences/s  ratio={theirs_s / ours_s:.2f}")
        else:
            steps = len(batches)
            print(f"  training step: ours {1000 * ours_s / steps:.1f} ms, theirs {1000 * theirs_s / steps:.1f} ms  "
                  f"ratio={theirs_s / ours_s:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mini", choices=sorted(PRESETS), help="bert preset (default mini, 4 x 256)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=8, help="batches per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per model (median)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/sst2"),
                        help="SST-2's directory, for the bucketed inputs (default ../shared/data/sst2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    import transformers

    cfg, ours, theirs = build(args.preset, args.vocab_size, device)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    print(f"bert {args.preset} ({cfg.n_layers} x {cfg.d_model}), {device_info(device)}; timed with "
          f"{pick_clock(device)[1]}; transformers {transformers.__version__} "
          f"(attention: {theirs.config._attn_implementation}); fused AdamW on both sides; "
          f"{'bf16 autocast' if device.type == 'cuda' else 'float32'}")
    bucketed = [b.to(device) for b in bucketed_batches(args.data, args.batch_size, args.batches, args.vocab_size,
                                                       seed=0)]
    generator = torch.Generator().manual_seed(1)
    fixed = [torch.randint(5, args.vocab_size, (args.batch_size, min(128, cfg.max_positions)), generator=generator)
             .to(device) for _ in range(args.batches)]
    sets = (("bucketed", bucketed), ("fixed128", fixed))
    for label, batches in sets:  # the two must compute the same function before their speed means anything
        print(f"[{label}] max|ours - theirs| = {difference(batches, ours, theirs):.2e}")
    for label, batches in sets:
        measure(label, batches, ours, theirs, cfg.d_model, device, args.repeats, autocast)


if __name__ == "__main__":
    main()
