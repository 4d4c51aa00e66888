"""Hugging Face checkpoints in and out: the BERT family (model_type bert: BERT, MiniLM, ...) as our
`bert`, GPT-2 (model_type gpt2) as our `gpt`.

In: `model.init_from: DIR` where DIR holds config.json, model.safetensors (or its shards and
model.safetensors.index.json) and the vocabulary (vocab.txt or tokenizer.json; GPT-2: tokenizer.json
or vocab.json + merges.txt). The model section comes from config.json (`start_config`), the tokenizer
and vocabulary from the vocabulary files (`text_pipeline`), the encoder weights renamed to ours
(`encoder_state`); the task adds its head. Weights are read from safetensors only: a directory with
only pytorch_model.bin (a pickle, which can run code when loaded) is refused, with the way to convert it.

Out: `export_run(RUN, (config, task, model), DIR)` writes a loaded bert or gpt run so `transformers` loads
it (config.json, model.safetensors, vocab.txt / tokenizer.json); `experiment.export_run` loads the run.
The model's description (its head's kind and sizes, which a run keeps) chooses the class: a bert
classifier with one linear layer over the pooled [CLS] vector is written as BertForSequenceClassification
and a gpt language model as GPT2LMHeadModel, so logits match too; other heads leave the bare encoder.

Where the two formats differ:
- BERT keeps query, key and value in three Linear layers; ours stacks them in one [3D, D] `in_proj`
  (rows [query | key | value], modules/attention.py): concatenated on the way in, split on the way out.
- GPT-2's Conv1D stores weights as [in, out], the transpose of a Linear's [out, in].
- GPT-2's output layer is its token embedding (tied); its GELU is the tanh approximation ("gelu_new"),
  BERT's the exact erf one ("gelu"); BERT's LayerNorm eps is 1e-12, GPT-2's 1e-5.
- Some checkpoints carry no pooler or no token-type embeddings (sentence-embedding models): the
  model section then says `pooler: false` or `segments: 0`.
- Names may carry the head model's prefix ("bert.", "transformer.") or none; LayerNorm parameters of
  old TensorFlow conversions are named gamma/beta.
"""

# D model dim, V vocabulary size

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from textnn.data.tokenizers import CLS, SEP, UNK, Tokenizer
from textnn.data.vocab import Vocab
from textnn.errors import TextnnError
from textnn.files import temporary_dir_beside

FAMILIES = {"bert": "bert", "gpt2": "gpt"}  # Hugging Face model_type -> our family
_GELU_IN = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh"}


class Checkpoint:
    """A Hugging Face checkpoint directory, each of its files read at most once: config.json when first
    asked (`config`), the tensors' names and shapes from the safetensors headers (`shapes`: what the
    model section and the vocabulary check need), and the tensors themselves only for the weights
    (`state`). A start is opened once (transfer.open_start), so one run reads each file once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @cached_property
    def config(self) -> dict:
        """config.json, of a supported architecture, or one clear error."""
        file = self.path / "config.json"
        if not file.is_file():
            raise TextnnError(f"{self.path}: no config.json; a Hugging Face checkpoint directory holds config.json, "
                              f"model.safetensors and its vocabulary")
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise TextnnError(f"{file}: not valid JSON ({err}); the checkpoint is damaged") from None
        model_type = config.get("model_type") if isinstance(config, dict) else None
        if model_type not in FAMILIES:
            raise TextnnError(f"{file}: model_type {model_type!r} is not a supported Hugging Face architecture; "
                              f"supported: {', '.join(f'{k} (as {v})' for k, v in FAMILIES.items())}")
        return config

    @cached_property
    def lowercase(self) -> bool:
        """Whether its BERT vocabulary is uncased (`_bert_lowercase`)."""
        return _bert_lowercase(self.path)

    @cached_property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, names as `state` gives them, from the files' headers (no tensor is read)."""
        shapes: dict[str, tuple[int, ...]] = {}
        for file in self._files():
            try:
                with safe_open(str(file), framework="pt") as opened:
                    shapes.update({name: tuple(opened.get_slice(name).get_shape()) for name in opened.keys()})
            except Exception as err:  # safetensors raises its own error types for a damaged file
                raise TextnnError(f"{file}: not a readable safetensors file ({err}); the checkpoint is damaged") from None
        return _renamed(shapes)

    @cached_property
    def state(self) -> dict[str, torch.Tensor]:
        """Every tensor of the checkpoint, names as written (LayerNorm gamma/beta renamed weight/bias)."""
        state: dict[str, torch.Tensor] = {}
        for file in self._files():
            try:
                state.update(load_file(str(file)))
            except Exception as err:  # safetensors raises its own error types for a damaged file
                raise TextnnError(f"{file}: not a readable safetensors file ({err}); the checkpoint is damaged") from None
        return _renamed(state)

    def _files(self) -> list[Path]:
        files = _weights_files(self.path)
        for file in files:
            if not file.is_file():
                raise TextnnError(f"{file}: missing shard of the checkpoint; download it again")
        return files


def _renamed(tensors: dict) -> dict:
    """Old TensorFlow conversions name LayerNorm parameters gamma/beta: weight/bias here."""
    renamed = {}
    for name, value in tensors.items():
        if name.endswith(".gamma") or name.endswith(".beta"):
            name = name.rsplit(".", 1)[0] + (".weight" if name.endswith(".gamma") else ".bias")
        renamed[name] = value
    return renamed


def _weights_files(path: Path) -> list[Path]:
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, UnicodeDecodeError, AttributeError) as err:
            raise TextnnError(f"{index}: not a safetensors index ({err}); the checkpoint is damaged") from None
        return [path / shard for shard in shards]
    if (path / "pytorch_model.bin").is_file():
        raise TextnnError(f"{path}: holds only pytorch_model.bin, a pickle, which can run code when loaded and "
                          f"is never read here; convert it once to safetensors where you trust it: python -c "
                          f"\"from transformers import AutoModel; AutoModel.from_pretrained('{path}')"
                          f".save_pretrained('{path}', safe_serialization=True)\"")
    raise TextnnError(f"{path}: no model.safetensors; a Hugging Face checkpoint directory holds config.json, "
                      f"model.safetensors and its vocabulary")


def _strip_prefix(state: dict, prefix: str, anchor: str) -> dict:
    """Names relative to the base model: `prefix` removed when the checkpoint is a head model's
    (`state` maps names to tensors or to shapes)."""
    if anchor not in state and prefix + anchor in state:
        return {name[len(prefix):]: t for name, t in state.items() if name.startswith(prefix)}
    return state


# ------------------------------------------------------------------------------------- model section

def start_config(checkpoint: Checkpoint, origin: str) -> dict:
    """The raw config sections (model, data) a run starting from this checkpoint inherits."""
    path = checkpoint.path
    hf = {**checkpoint.config, "_file": str(path / "config.json")}
    try:
        if hf["model_type"] == "bert":
            model = _bert_section(hf, _strip_prefix(checkpoint.shapes, "bert.", "embeddings.word_embeddings.weight"))
            data = {"tokenizer": "wordpiece", "lowercase": checkpoint.lowercase}
        else:
            model = _gpt2_section(hf)
            data = {"tokenizer": "bpe", "lowercase": False}
    except KeyError as err:
        raise TextnnError(f"{origin}: model.init_from={path}: config.json lacks {err.args[0]!r}; the checkpoint "
                          f"is damaged or not a {hf['model_type']} checkpoint") from None
    return {"model": model, "data": data}


def _unsupported(hf: dict, key: str, value: object, supported: str) -> TextnnError:
    return TextnnError(f"{hf['_file']}: {key}={value!r} is not supported for model_type {hf['model_type']} "
                       f"(supported: {supported})")


def _bert_section(hf: dict, state: dict) -> dict:  # state: the tensors' names (and shapes)
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise _unsupported(hf, "position_embedding_type", hf["position_embedding_type"], "absolute")
    if hf.get("hidden_act", "gelu") not in _GELU_IN:
        raise _unsupported(hf, "hidden_act", hf["hidden_act"], ", ".join(_GELU_IN))
    has_segments = "embeddings.token_type_embeddings.weight" in state
    return {"name": "bert", "n_layers": hf["num_hidden_layers"], "n_heads": hf["num_attention_heads"],
            "d_model": hf["hidden_size"], "d_ff": hf.get("intermediate_size", 4 * hf["hidden_size"]),
            "max_positions": hf.get("max_position_embeddings", 512),
            "segments": hf.get("type_vocab_size", 2) if has_segments else 0,
            "dropout": hf.get("hidden_dropout_prob", 0.1), "attention_dropout": hf.get("attention_probs_dropout_prob", 0.1),
            "eps": hf.get("layer_norm_eps", 1e-12), "gelu": _GELU_IN[hf.get("hidden_act", "gelu")],
            "pooler": "pooler.dense.weight" in state}


def _gpt2_section(hf: dict) -> dict:
    act = hf.get("activation_function", "gelu_new")
    if act not in _GELU_IN:
        raise _unsupported(hf, "activation_function", act, ", ".join(_GELU_IN))
    if abs(hf.get("layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
        raise _unsupported(hf, "layer_norm_epsilon", hf["layer_norm_epsilon"], "1e-5")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if hf.get(flag):
            raise _unsupported(hf, flag, True, "false")
    if not hf.get("scale_attn_weights", True):
        raise _unsupported(hf, "scale_attn_weights", False, "true")
    return {"name": "gpt", "n_layers": hf["n_layer"], "n_heads": hf["n_head"], "d_model": hf["n_embd"],
            "d_ff": hf.get("n_inner") or 0, "context": hf.get("n_positions", hf.get("n_ctx", 1024)),
            "dropout": hf.get("resid_pdrop", 0.1), "tie": bool(hf.get("tie_word_embeddings", True)), "bias": True,
            "gelu": _GELU_IN[act]}


def _bert_lowercase(path: Path) -> bool:
    """Uncased or cased: tokenizer_config.json's do_lower_case, else tokenizer.json's normaliser, else
    the vocabulary itself (an uncased one holds no upper-case piece)."""
    for name, read in (("tokenizer_config.json", lambda d: d.get("do_lower_case")),
                       ("tokenizer.json", lambda d: (d.get("normalizer") or {}).get("lowercase"))):
        file = path / name
        if file.is_file():
            try:
                value = read(json.loads(file.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                value = None
            if isinstance(value, bool):
                return value
    if (path / "vocab.txt").is_file():
        words = [w for w in (path / "vocab.txt").read_text(encoding="utf-8").splitlines() if not w.startswith("[")]
        return not any(w != w.lower() for w in words)
    return True


# ------------------------------------------------------------------------------------ tokenizer, vocab

def text_pipeline(checkpoint: Checkpoint) -> tuple[Tokenizer, Vocab]:
    """The checkpoint's tokenizer and vocabulary (ids as its embedding rows), checked against the embedding size."""
    path, hf = checkpoint.path, checkpoint.config
    if hf["model_type"] == "bert":
        source = path / "tokenizer.json" if (path / "tokenizer.json").is_file() else path / "vocab.txt"
        if not source.is_file():
            raise TextnnError(f"{path}: no vocab.txt or tokenizer.json; the checkpoint's vocabulary is needed to "
                              f"read text with it")
        tokenizer = Tokenizer.load_wordpiece(source, checkpoint.lowercase)
        vocab = Vocab(tokenizer.vocabulary(), unk=UNK if UNK in tokenizer.vocabulary() else None)
        rows_name, prefix = "embeddings.word_embeddings.weight", "bert."
    else:
        source = path / "tokenizer.json"
        tokenizer = _gpt2_tokenizer(path)
        vocab = Vocab(tokenizer.vocabulary(), unk=None)  # byte-level: no text is ever unknown
        rows_name, prefix = "wte.weight", "transformer."
    shapes = _strip_prefix(checkpoint.shapes, prefix, rows_name)
    if rows_name in shapes and shapes[rows_name][0] != len(vocab):
        raise TextnnError(f"{source}: the vocabulary has {len(vocab):,} tokens but the checkpoint's embedding has "
                          f"{shapes[rows_name][0]:,} rows; the files do not belong together: use the vocabulary "
                          f"the model was trained with")
    return tokenizer, vocab


def _gpt2_tokenizer(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    try:
        if (path / "tokenizer.json").is_file():
            model = HFTokenizer.from_file(str(path / "tokenizer.json"))
        elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            model = HFTokenizer(models.BPE.from_file(str(path / "vocab.json"), str(path / "merges.txt")))
            model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            model.decoder = decoders.ByteLevel()
        else:
            raise TextnnError(f"{path}: no tokenizer.json (or vocab.json + merges.txt); the checkpoint's "
                              f"vocabulary is needed to read text with it")
    except TextnnError:
        raise
    except Exception as err:  # the library raises its own types on bad files
        raise TextnnError(f"{path}: the GPT-2 vocabulary files cannot be read ({err})") from None
    model.no_padding()
    model.no_truncation()
    return Tokenizer("bpe", False, model)


# -------------------------------------------------------------------------------------------- weights

def _bert_names(n_layers: int) -> list[tuple[str, str]]:
    """(ours, theirs) for every BERT tensor but the stacked attention projections."""
    names = [("token_embedding.weight", "embeddings.word_embeddings.weight"),
             ("position_embedding.weight", "embeddings.position_embeddings.weight"),
             ("segment_embedding.weight", "embeddings.token_type_embeddings.weight"),
             ("ln_embedding.weight", "embeddings.LayerNorm.weight"), ("ln_embedding.bias", "embeddings.LayerNorm.bias"),
             ("pooler.weight", "pooler.dense.weight"), ("pooler.bias", "pooler.dense.bias")]
    for i in range(n_layers):
        ours, theirs = f"blocks.{i}.", f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            names += [(f"{ours}attn.out_proj.{kind}", f"{theirs}attention.output.dense.{kind}"),
                      (f"{ours}ln_attn.{kind}", f"{theirs}attention.output.LayerNorm.{kind}"),
                      (f"{ours}ff.fc.{kind}", f"{theirs}intermediate.dense.{kind}"),
                      (f"{ours}ff.proj.{kind}", f"{theirs}output.dense.{kind}"),
                      (f"{ours}ln_ff.{kind}", f"{theirs}output.LayerNorm.{kind}")]
    return names


def _gpt2_names(n_layers: int) -> list[tuple[str, str, bool]]:
    """(ours, theirs, transposed) for every GPT-2 tensor: Conv1D weights are [in, out]."""
    names = [("token_embedding.weight", "wte.weight", False), ("position_embedding.weight", "wpe.weight", False),
             ("ln_final.weight", "ln_f.weight", False), ("ln_final.bias", "ln_f.bias", False)]
    for i in range(n_layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        names += [(f"{ours}ln_attn.weight", f"{theirs}ln_1.weight", False), (f"{ours}ln_attn.bias", f"{theirs}ln_1.bias", False),
                  (f"{ours}ln_ff.weight", f"{theirs}ln_2.weight", False), (f"{ours}ln_ff.bias", f"{theirs}ln_2.bias", False)]
        for our_layer, their_layer in (("attn.in_proj", "attn.c_attn"), ("attn.out_proj", "attn.c_proj"),
                                       ("ff.fc", "mlp.c_fc"), ("ff.proj", "mlp.c_proj")):
            names += [(f"{ours}{our_layer}.weight", f"{theirs}{their_layer}.weight", True),
                      (f"{ours}{our_layer}.bias", f"{theirs}{their_layer}.bias", False)]
    return names


def encoder_state(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """The checkpoint's encoder weights under our names (`encoder.*`), as a start's `weights` give them."""
    hf, state = checkpoint.config, checkpoint.state
    ours: dict[str, torch.Tensor] = {}
    if hf["model_type"] == "bert":
        state = _strip_prefix(state, "bert.", "embeddings.word_embeddings.weight")
        for name, theirs in _bert_names(hf["num_hidden_layers"]):
            if theirs in state:
                ours[name] = state[theirs]
        for i in range(hf["num_hidden_layers"]):
            attention = f"encoder.layer.{i}.attention.self."
            for kind in ("weight", "bias"):
                parts = [state.get(f"{attention}{p}.{kind}") for p in ("query", "key", "value")]
                if all(p is not None for p in parts):
                    ours[f"blocks.{i}.attn.in_proj.{kind}"] = torch.cat(parts, dim=0)  # 3 x [D(, D)] -> [3D(, D)]
    else:
        state = _strip_prefix(state, "transformer.", "wte.weight")
        for name, theirs, transposed in _gpt2_names(hf["n_layer"]):
            if theirs in state:
                ours[name] = state[theirs].t() if transposed else state[theirs]  # Conv1D [in, out] -> [out, in]
    return {f"encoder.{name}": tensor.contiguous() for name, tensor in ours.items()}


# --------------------------------------------------------------------------------------------- export

def export_run(run_dir: str | Path, loaded: tuple, out_dir: str | Path, described: object = None) -> list[Path]:
    """Write a bert or gpt run as a Hugging Face checkpoint directory; returns the files written.

    `loaded`: the run in `run_dir` as (config, task, model), weights loaded (`experiment.load_run` gives
    it, after `check_export_place`; taken as an argument, since runs are loaded a layer above this one).
    `described`: the model's description as the run saved it (run.json `model`, `EncoderWithHead.describe`);
    None for a run saved before runs kept one, which the loaded model then gives. It alone decides the
    class written (`_architecture`). The directory is new (or empty) and appears whole: written beside it,
    then renamed into place.
    """
    from safetensors.torch import save

    out = Path(out_dir)
    config, task, model = loaded
    family, cfg = config.model_name, config.model
    if family not in ("bert", "gpt"):
        raise TextnnError(f"{run_dir}: model {family} has no Hugging Face counterpart; export writes bert and gpt runs")
    tokenizer, vocab = task.tokenizer, task.vocab
    wanted = "wordpiece" if family == "bert" else "bpe"
    if tokenizer.kind != wanted:
        raise TextnnError(f"{run_dir}: a {family} run is exported with its {wanted} tokenizer, and this run read "
                          f"text with the {tokenizer.kind} tokenizer, which transformers cannot rebuild; train with "
                          f"data.tokenizer={wanted}")
    described = _checked_description(run_dir, model.describe() if described is None else described)
    architecture = _architecture(family, described, pooler=family == "bert" and cfg.pooler)
    encoder = {name: t.detach().cpu() for name, t in model.encoder.state_dict().items()}
    if family == "bert":
        tensors, hf = bert_to_hf(cfg, encoder, len(vocab), vocab.pad_id)
        if architecture == "BertForSequenceClassification":
            tensors = {f"bert.{name}": t for name, t in tensors.items()}
            output = model.head.output  # the head's one linear layer
            tensors["classifier.weight"], tensors["classifier.bias"] = output.weight, output.bias
            labels = list(task.labels) or ["score"]  # regression: one output, which transformers reads as regression
            hf.update(architectures=[architecture], num_labels=len(labels),
                      id2label={str(i): label for i, label in enumerate(labels)},
                      label2id={label: i for i, label in enumerate(labels)})
            if described["head"]["kind"] == "linear regression":
                hf["problem_type"] = "regression"
    else:
        if not cfg.bias:
            raise TextnnError(f"{run_dir}: a gpt run with model.bias=false has no GPT-2 counterpart (GPT-2 has biases)")
        tensors, hf = gpt2_to_hf(cfg, encoder, len(vocab))
        if architecture == "GPT2LMHeadModel":
            tensors = {f"transformer.{name}": t for name, t in tensors.items()}
            hf["architectures"] = [architecture]
            if not described["head"].get("tied"):
                tensors["lm_head.weight"] = model.head.decoder.weight
    tensors = {name: t.detach().cpu().contiguous().clone() for name, t in tensors.items()}
    files = {"config.json": json.dumps(hf, indent=2), "model.safetensors": save(tensors, metadata={"format": "pt"})}
    hf_tokenizer = tokenizer.model
    if family == "bert":
        from tokenizers import processors

        files["vocab.txt"] = "".join(token + "\n" for token in vocab.itos)
        hf_tokenizer = type(tokenizer.model).from_str(tokenizer.model.to_str())
        hf_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{CLS} $A {SEP}", pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
            special_tokens=[(CLS, vocab.stoi[CLS]), (SEP, vocab.stoi[SEP])])
        settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.lowercase,
                    "model_max_length": cfg.max_positions, "unk_token": UNK, "sep_token": SEP, "cls_token": CLS,
                    "pad_token": vocab.itos[vocab.pad_id], "mask_token": "[MASK]"}
    else:
        settings = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": cfg.context}
    files["tokenizer.json"] = hf_tokenizer.to_str()
    files["tokenizer_config.json"] = json.dumps(settings, indent=2)
    with temporary_dir_beside(out, "export") as staging:
        for name, data in files.items():
            (staging / name).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return [out / name for name in files]


def _checked_description(run_dir: str | Path, described: object) -> dict:
    """The model's description (`EncoderWithHead.describe`), checked to be one: run.json may have been edited."""
    head = described.get("head") if isinstance(described, dict) else None
    reads = described.get("head_input") if isinstance(described, dict) else None
    if not (isinstance(head, dict) and isinstance(head.get("kind"), str) and isinstance(reads, str)):
        raise TextnnError(f"{Path(run_dir) / 'run.json'}: its `model` entry is not a model's description "
                          f"({str(described)[:80]}); the file was edited: remove that entry, and export takes the "
                          f"description from the loaded model")
    return described


def _architecture(family: str, described: dict, pooler: bool) -> str:
    """The transformers class a run of `family` with the model `described` is written as: a head that is one
    linear layer over BERT's sentence vector from its pooler (`pooler`: the encoder has one; without it,
    transformers would put a random pooler in its place) is BertForSequenceClassification's classifier;
    a GPT-2 language model's output layer (no bias) is GPT2LMHeadModel's; any other head has no
    counterpart there, and the encoder alone is written (BertModel, GPT2Model)."""
    head = described["head"]
    if family == "bert":
        one_linear = head["kind"] in ("linear classifier", "linear regression")
        pooled = one_linear and described["head_input"] == "sentence" and pooler
        return "BertForSequenceClassification" if pooled else "BertModel"
    return "GPT2LMHeadModel" if head["kind"] == "lm" and not head.get("bias") else "GPT2Model"


def check_export_place(run_dir: Path, out: Path) -> None:
    """Refuse, before any work, an export that would write over something: the run itself or a folder in
    it (config.json, model.safetensors and tokenizer.json are names of both), a file, or a directory
    that holds anything."""
    if out.resolve() == run_dir.resolve() or run_dir.resolve() in out.resolve().parents:
        raise TextnnError(f"{out}: is the run directory {run_dir} or a folder inside it; give a directory "
                          f"outside the run")
    if out.exists() and not out.is_dir():
        raise TextnnError(f"{out}: a file of that name is in the way; give a directory to write (a new one)")
    if out.is_dir() and any(out.iterdir()):
        raise TextnnError(f"{out}: the directory exists and is not empty; give a new or empty directory, "
                          f"or delete it first")


def bert_to_hf(cfg, encoder: dict[str, torch.Tensor], vocab_size: int, pad_id: int) -> tuple[dict, dict]:
    """Our bert encoder's state (no prefix) -> (BertModel's state, its config.json dict)."""
    tensors = {theirs: encoder[ours] for ours, theirs in _bert_names(cfg.n_layers) if ours in encoder}
    d = cfg.d_model
    if not cfg.segments:  # transformers' BertModel always adds token types: one zero row changes nothing
        tensors["embeddings.token_type_embeddings.weight"] = torch.zeros(1, d)
    for i in range(cfg.n_layers):
        for kind in ("weight", "bias"):
            q, k, v = encoder[f"blocks.{i}.attn.in_proj.{kind}"].split(d, dim=0)  # [3D(, D)] -> 3 x [D(, D)]
            for part, tensor in (("query", q), ("key", k), ("value", v)):
                tensors[f"encoder.layer.{i}.attention.self.{part}.{kind}"] = tensor
    hf = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": vocab_size, "hidden_size": d,
          "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.ff_size,
          "hidden_act": "gelu" if cfg.gelu == "exact" else "gelu_new", "hidden_dropout_prob": cfg.dropout,
          "attention_probs_dropout_prob": cfg.attention_dropout, "max_position_embeddings": cfg.max_positions,
          "type_vocab_size": cfg.segments or 1, "initializer_range": 0.02, "layer_norm_eps": cfg.eps,
          "pad_token_id": pad_id, "position_embedding_type": "absolute"}
    return tensors, hf


def gpt2_to_hf(cfg, encoder: dict[str, torch.Tensor], vocab_size: int) -> tuple[dict, dict]:
    """Our gpt encoder's state (no prefix) -> (GPT2Model's state, its config.json dict)."""
    tensors = {theirs: (encoder[ours].t() if transposed else encoder[ours])  # [out, in] -> Conv1D [in, out]
               for ours, theirs, transposed in _gpt2_names(cfg.n_layers)}
    hf = {"architectures": ["GPT2Model"], "model_type": "gpt2", "vocab_size": vocab_size, "n_positions": cfg.context,
          "n_embd": cfg.d_model, "n_layer": cfg.n_layers, "n_head": cfg.n_heads, "n_inner": cfg.ff_size,
          "activation_function": "gelu_new" if cfg.gelu == "tanh" else "gelu", "resid_pdrop": cfg.dropout,
          "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.dropout, "layer_norm_epsilon": 1e-5,
          "initializer_range": 0.02, "tie_word_embeddings": cfg.tie}
    return tensors, hf
