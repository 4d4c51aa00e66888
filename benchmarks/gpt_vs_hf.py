"""Speed: our `gpt` language model against transformers' GPT2LMHeadModel with the same config, weights and inputs.

Our model (the `gpt` encoder with its tied LM head, as `task: language_modeling` builds it) is exported
to GPT-2's names (interop/huggingface.py) and loaded into GPT2LMHeadModel, so both compute the same
function: the script checks that their next-token log-probabilities agree before timing. Inputs:
random token windows of `--context` tokens (a language model's training batches have no padding).

Measured, the two models interleaved, with the CPU time of the compute thread on a CPU with one torch
thread (wall-clock time on a GPU or with several threads): inference tokens/s (eval mode, no
gradients, the logits of every position) and the time of one training step (train mode, dropout on,
next-token cross-entropy, backward, AdamW). Printed as `ratio=<ours/theirs>` in throughput, so above
1 means ours is faster. `--precision bf16` runs both under bf16 autocast (on a GPU, or a CPU with
native bf16); the default compares float32 with float32.

With `--new-tokens N` (> 0) it also times greedy generation, each side with its key/value cache: the
first `--prompt` tokens of each row of the first batch continued by N tokens, ours through
`generation.decoding.decode` (what `textnn generate` and `textnn serve` run), theirs through
`GPT2LMHeadModel.generate(do_sample=False)`, neither stopping early. The script checks that both choose
the same tokens, then prints generated tokens/s (B x N over the time of the whole call, the prompt's
pass included) and the ratio.

    python benchmarks/gpt_vs_hf.py                                  # preset small (2 x 192), 128 tokens
    python benchmarks/gpt_vs_hf.py --preset gpt2 --context 256 --batch-size 4
    python benchmarks/gpt_vs_hf.py --preset tiny --batches 2 --repeats 1   # a quick check that it runs
    python benchmarks/gpt_vs_hf.py --batch-size 8 --new-tokens 64        # and greedy generation
"""

# B batch, T tokens, V vocabulary

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.nn.functional as F
from machine import device_info, interleaved_medians, pick_clock  # benchmarks/machine.py

from textnn.generation.decoding import DecodingConfig, decode
from textnn.interop.huggingface import gpt2_to_hf
from textnn.models.gpt import PRESETS
from textnn.tasks.language_modeling import language_model


def build(preset: str, vocab_size: int, device: torch.device):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = PRESETS[preset].options(bias=True, tie=True)
    torch.manual_seed(0)
    ours = language_model("gpt", cfg, vocab_size).to(device)
    encoder = {name: t.detach().cpu() for name, t in ours.encoder.state_dict().items()}
    state, hf_config = gpt2_to_hf(cfg, encoder, vocab_size)
    theirs = GPT2LMHeadModel(GPT2Config(**hf_config)).to(device)
    missing, unexpected = theirs.load_state_dict({f"transformer.{k}": v for k, v in state.items()}, strict=False)
    assert not unexpected and all(name in ("lm_head.weight",) or "attn.bias" in name or "masked_bias" in name
                                  for name in missing), (missing, unexpected)
    theirs.tie_weights()
    return cfg, ours, theirs


def our_logits(model, ids):
    states = model.encoder(ids, torch.ones_like(ids, dtype=torch.bool)).tokens  # [B, T, D]
    return model.head(states)  # [B, T, V]


def their_logits(model, ids):
    return model(input_ids=ids).logits  # [B, T, V]


@torch.no_grad()
def difference(batches, ours, theirs) -> float:
    """max |log p_ours - log p_theirs| over every position, in float32 eval mode."""
    ours.eval(), theirs.eval()
    return max((torch.log_softmax(our_logits(ours, ids), -1) - torch.log_softmax(their_logits(theirs, ids), -1))
               .abs().max().item() for ids in batches)


def measure(batches, ours, theirs, device, repeats, autocast) -> None:
    tokens = sum(b.numel() for b in batches)
    optimizers = {"ours": torch.optim.AdamW(ours.parameters(), lr=1e-4),
                  "theirs": torch.optim.AdamW(theirs.parameters(), lr=1e-4)}

    def infer(model, logits):
        def run():
            with torch.no_grad(), autocast():
                for ids in batches:
                    logits(model, ids)
        return run

    def train(model, logits, key):
        def run():
            for ids in batches:
                with autocast():
                    scores = logits(model, ids[:, :-1])  # [B, T-1, V]
                loss = F.cross_entropy(scores.float().flatten(0, 1), ids[:, 1:].flatten())  # [B*(T-1), V]
                optimizers[key].zero_grad(set_to_none=True)
                loss.backward()
                optimizers[key].step()
        return run

    for mode in ("inference", "training"):
        for model in (ours, theirs):
            model.train(mode == "training")
        runs = {key: infer(model, logits) if mode == "inference" else train(model, logits, key)
                for key, model, logits in (("ours", ours, our_logits), ("theirs", theirs, their_logits))}
        medians = interleaved_medians(runs, repeats, device)
        ours_s, theirs_s = medians["ours"], medians["theirs"]
        if mode == "inference":
            print(f"  inference: ours {tokens / ours_s:,.0f} tokens/s, theirs {tokens / theirs_s:,.0f} tokens/s  "
                  f"ratio={theirs_s / ours_s:.2f}")
        else:
            print(f"  training step: ours {1000 * ours_s / len(batches):.1f} ms, theirs "
                  f"{1000 * theirs_s / len(batches):.1f} ms  ratio={theirs_s / ours_s:.2f}")


@torch.no_grad()
def measure_generation(prompts, new_tokens, ours, theirs, device, repeats, autocast) -> None:
    """Greedy continuation of `prompts` [B, P] by `new_tokens` tokens a row, both sides with their caches."""
    ours.eval(), theirs.eval()
    greedy = DecodingConfig(method="greedy", max_tokens=new_tokens, stop_at_eos=False)
    outputs = {}

    def run_ours():
        with autocast():
            outputs["ours"] = [row[0].tokens for row in decode(ours, None, prompts, greedy)]

    def run_theirs():
        with autocast():
            out = theirs.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=True,
                                  eos_token_id=None, pad_token_id=0)  # [B, P + N]
        outputs["theirs"] = out[:, prompts.size(1):].tolist()

    run_ours(), run_theirs()
    same = sum(a == b for a, b in zip(outputs["ours"], outputs["theirs"]))
    print(f"  greedy generation: {same} of {prompts.size(0)} rows choose the same {new_tokens} tokens on both sides")
    medians = interleaved_medians({"ours": run_ours, "theirs": run_theirs}, repeats, device)
    tokens = prompts.size(0) * new_tokens
    print(f"  greedy generation, {prompts.size(0)} x ({prompts.size(1)} + {new_tokens}) tokens: ours "
          f"{tokens / medians['ours']:,.0f} new tokens/s, theirs {tokens / medians['theirs']:,.0f} new tokens/s  "
          f"ratio={medians['theirs'] / medians['ours']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=128, help="tokens per window (at most the preset's context)")
    parser.add_argument("--batches", type=int, default=4, help="batches per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per model (median)")
    parser.add_argument("--vocab-size", type=int, default=33279, help="WikiText-2's word vocabulary by default")
    parser.add_argument("--new-tokens", type=int, default=0, help="also time greedy generation of this many tokens "
                        "a row (0 = off)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens a row for --new-tokens")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    import transformers

    cfg, ours, theirs = build(args.preset, args.vocab_size, device)
    context = min(args.context, cfg.context)
    autocast = ((lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if args.precision == "bf16"
                else contextlib.nullcontext)
    print(f"gpt {args.preset} ({cfg.n_layers} x {cfg.d_model}, V {args.vocab_size}), {device_info(device)}; timed "
          f"with {pick_clock(device)[1]}; transformers {transformers.__version__} (attention: "
          f"{theirs.config._attn_implementation}); {args.precision}; {args.batch_size} x {context} tokens per batch")
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, args.vocab_size, (args.batch_size, context), generator=generator).to(device)
               for _ in range(args.batches)]
    print(f"  max|log p ours - log p theirs| = {difference(batches, ours, theirs):.2e}")
    if args.new_tokens:  # before the training steps below, which change each side's weights differently
        prompt = min(args.prompt, context - args.new_tokens)
        if prompt < 1:
            parser.error(f"--prompt and --new-tokens must fit in the context of {context} tokens")
        measure_generation(batches[0][:, :prompt], args.new_tokens, ours, theirs, device, args.repeats, autocast)
    measure(batches, ours, theirs, device, args.repeats, autocast)


if __name__ == "__main__":
    main()
