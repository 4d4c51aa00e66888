"""word2vec: the update rule, the Huffman tree, subsampling, a corpus with planted structure, the output
files, the analogy and similarity metrics, and bad input."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from textnn.errors import TextnnError
from textnn.interop.vectors import read_vectors
from textnn.resolve import config_from_dict
from textnn.metrics.word_vectors import (WordVectors, evaluate_analogies, evaluate_similarity, read_analogies,
                                        read_similarity_pairs)
from textnn.models.word2vec import huffman_tree, keep_probabilities
from textnn.tasks.embeddings import EmbeddingsTask
from textnn.training.word2vec import cbow_shared_noise_step, sgd_step

TOPIC_A = "apple banana cherry grape lemon mango melon peach pear plum".split()
TOPIC_B = "bolt gear lever nut piston pulley rivet screw spring valve".split()


def config(train: Path, **model) -> object:
    raw = {"task": "embeddings", "data": {"format": "text", "train": str(train), "min_freq": 1},
           "model": {"name": "word2vec", "preset": "tiny", **model},
           "train": {"epochs": 1, "threads": 1, "progress": False, "device": "cpu"}}
    return config_from_dict(raw, "test")


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# --- the update rule -------------------------------------------------------------------------------
@pytest.mark.parametrize("cbow", [False, True])
def test_negative_sampling_update_matches_hand_computation(cbow: bool) -> None:
    rng = np.random.default_rng(0)
    vocab, dim, lr = 7, 4, 0.1
    inputs = torch.tensor(rng.normal(size=(vocab, dim)), dtype=torch.float64)
    outputs = torch.tensor(rng.normal(size=(vocab, dim)), dtype=torch.float64)
    before_in, before_out = inputs.clone(), outputs.clone()
    context = torch.tensor([[1, 2, 0]])  # the third slot is padding
    mask = torch.tensor([[True, True, False]])
    targets = torch.tensor([[3, 4, 5]])  # the word, then two noise words
    labels = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    weights = torch.ones(1, 3, dtype=torch.float64)
    loss = sgd_step(inputs, outputs, context, mask, targets, labels, weights, lr, cbow=cbow)

    expected_in, expected_out, expected_loss = before_in.numpy().copy(), before_out.numpy().copy(), 0.0
    u = before_out.numpy()
    sources = [before_in[1].numpy(), before_in[2].numpy()]
    if cbow:
        sources = [(sources[0] + sources[1]) / 2]
    for h in sources:
        grad_h = np.zeros(dim)
        for target, label in ((3, 1), (4, 0), (5, 0)):
            score = float(h @ u[target])
            g = label - sigmoid(score)  # minus d loss / d score
            expected_loss -= math.log(sigmoid(score) if label else sigmoid(-score))
            grad_h += lr * g * u[target]
            expected_out[target] += lr * g * h
        if cbow:  # the whole gradient of the mean goes to every window word, as word2vec.c does
            expected_in[1] += grad_h
            expected_in[2] += grad_h
        else:
            row = 1 if h is sources[0] else 2
            expected_in[row] += grad_h
    assert float(loss) == pytest.approx(expected_loss, rel=1e-9)
    np.testing.assert_allclose(inputs.numpy(), expected_in, rtol=1e-9)
    np.testing.assert_allclose(outputs.numpy(), expected_out, rtol=1e-9)
    assert torch.equal(inputs[0], before_in[0]) and torch.equal(inputs[6], before_in[6])  # untouched rows


def test_cbow_on_the_cpu_trains_word_after_word_as_word2vec_c() -> None:
    """The compiled CPU step against a plain loop: each word's window (its drawn reach on either side,
    in its own line), the mean, its targets' updates and the error added to every window word, each
    word seeing the updates of the words before it (they share rows here); a dropped target (weight 0)
    and a word alone in its line are skipped, and words outside start..start + N are read, not trained."""
    from textnn.training.word2vec_cpu import cbow_step

    rng = np.random.default_rng(1)
    vocab, dim, lr = 6, 5, 0.2
    inputs = torch.tensor(rng.normal(size=(vocab, dim)), dtype=torch.float32)
    outputs = torch.tensor(rng.normal(size=(vocab, dim)), dtype=torch.float32)
    before_in, before_out = inputs.clone(), outputs.clone()
    stream = torch.tensor([4, 1, 2, 3, 1, 2, 5, 0, 3])
    sentence = torch.tensor([0, 0, 0, 0, 0, 0, 1, 2, 2])  # word 6 (id 5) is alone in its line
    start, reach = 2, torch.tensor([2, 1, 3, 1, 1])  # trains positions 2..6
    targets = torch.tensor([[2, 4, 3], [3, 4, 4], [1, 0, 2], [2, 1, 0], [5, 1, 2]])
    labels = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    weights = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 0.5, 1.0], [1.0, 1.0, 1.0]])
    expected_in, expected_out = inputs.double().numpy().copy(), outputs.double().numpy().copy()
    expected_loss = 0.0
    for n in range(len(targets)):
        centre = start + n
        window = [int(stream[p]) for p in range(len(stream)) if p != centre and abs(p - centre) <= int(reach[n])
                  and sentence[p] == sentence[centre]]
        if not window:
            continue
        h = expected_in[window].mean(0)
        error = np.zeros(dim)
        for target, label, weight in zip(targets[n].tolist(), labels[n].tolist(), weights[n].tolist()):
            if weight == 0:
                continue
            score = float(h @ expected_out[target])
            expected_loss -= weight * math.log(sigmoid(score) if label else sigmoid(-score))
            g = lr * weight * (label - sigmoid(score))
            error += g * expected_out[target]
            expected_out[target] += g * h
        for word in window:
            expected_in[word] += error
    loss = cbow_step(inputs, outputs, stream, sentence, start, reach, targets, labels, weights, lr)
    assert float(loss) == pytest.approx(expected_loss, rel=1e-5)
    np.testing.assert_allclose(inputs.numpy(), expected_in, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs.numpy(), expected_out, rtol=1e-5, atol=1e-6)
    assert not torch.equal(inputs, before_in) and not torch.equal(outputs, before_out)  # not a no-op
    assert torch.equal(outputs[5], before_out[5])  # only the lone word targets row 5: untouched


def test_skipgram_update_is_minus_lr_times_the_autograd_gradient() -> None:
    torch.manual_seed(0)
    inputs, outputs = torch.randn(20, 5, dtype=torch.float64), torch.randn(20, 5, dtype=torch.float64)
    context = torch.randperm(20)[:12].view(3, 4)  # each row in one window: no sharing (see the next test)
    mask = torch.rand(3, 4) < 0.7
    targets = torch.randperm(20)[:9].view(3, 3)
    labels = torch.tensor([[1.0, 0, 0]] * 3, dtype=torch.float64)
    weights = torch.tensor([[1.0, 1, 0]] * 3, dtype=torch.float64)  # a dropped noise word counts for nothing
    leaf_in, leaf_out = inputs.clone().requires_grad_(), outputs.clone().requires_grad_()
    scores = torch.einsum("ncd,ntd->nct", leaf_in[context], leaf_out[targets])
    signed = torch.where(labels.unsqueeze(1) > 0, scores, -scores)
    loss = -(F.logsigmoid(signed) * mask.unsqueeze(2) * weights.unsqueeze(1)).sum()
    loss.backward()
    returned = sgd_step(inputs, outputs, context, mask, targets, labels, weights, 0.05, cbow=False)
    assert float(returned) == pytest.approx(float(loss.detach()), rel=1e-9)
    torch.testing.assert_close(inputs, leaf_in.detach() - 0.05 * leaf_in.grad)
    torch.testing.assert_close(outputs, leaf_out.detach() - 0.05 * leaf_out.grad)


@pytest.mark.parametrize("cbow", [False, True])
def test_a_row_updated_by_several_windows_shares_their_update(cbow: bool) -> None:
    from textnn.training.word2vec import ROW_SHARE

    torch.manual_seed(1)
    start_in, start_out = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    window = (torch.tensor([[1, 2]]), torch.tensor([[True, True]]), torch.tensor([[3, 4]]),
              torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64))
    moves = []
    for copies in (1, 3):
        inputs, outputs = start_in.clone(), start_out.clone()
        sgd_step(inputs, outputs, *(part.repeat(copies, 1) for part in window), 0.1, cbow=cbow)
        moves.append((inputs - start_in, outputs - start_out))
    factor = 3 ** (1 - ROW_SHARE)  # three windows move a row by 3^(1 - s) times one window's update
    torch.testing.assert_close(moves[1][0], factor * moves[0][0])
    torch.testing.assert_close(moves[1][1], factor * moves[0][1])
    assert moves[0][0].abs().sum() > 0 and moves[0][1].abs().sum() > 0


@pytest.mark.parametrize("group", [1, 3])
def test_cbow_with_shared_noise_words_is_cbow_with_each_words_targets(group: int) -> None:
    """Sharing noise words within a group changes what is computed together, not the update: it is
    `sgd_step` with targets [word, noise of its group], shares of repeated rows and dropped draws included."""
    torch.manual_seed(2)
    vocab, dim, n, k = 9, 5, 7, 3  # 7 words: the last group of 3 is short
    start_in, start_out = torch.randn(vocab, dim, dtype=torch.float64), torch.randn(vocab, dim, dtype=torch.float64)
    context = torch.randint(vocab, (n, 4))
    mask = torch.rand(n, 4) < 0.7
    mask[2] = False  # a word alone in its sentence predicts nothing
    words = torch.tensor([0, 1, 1, 2, 3, 0, 4])  # repeated rows share their update (ROW_SHARE)
    noise = torch.randint(vocab, (-(-n // group), k))
    noise[0, 0] = words[0]  # a noise word equal to the word is dropped
    shared_in, shared_out = start_in.clone(), start_out.clone()
    loss = cbow_shared_noise_step(shared_in, shared_out, context, mask, words, noise, group, 0.1)
    own_noise = noise[torch.arange(n) % len(noise)]  # [N, K] each word's noise words (word i: group i % B)
    targets = torch.cat([words.unsqueeze(1), own_noise], 1)
    labels = torch.zeros(n, k + 1, dtype=torch.float64)
    labels[:, 0] = 1
    weights = torch.cat([torch.ones(n, 1), (own_noise != words.unsqueeze(1)).float()], 1).double()
    plain_in, plain_out = start_in.clone(), start_out.clone()
    expected = sgd_step(plain_in, plain_out, context, mask, targets, labels, weights, 0.1, cbow=True)
    assert float(loss) == pytest.approx(float(expected), rel=1e-12)
    torch.testing.assert_close(shared_in, plain_in)
    torch.testing.assert_close(shared_out, plain_out)
    assert not torch.equal(shared_in, start_in) and not torch.equal(shared_out, start_out)


# --- Huffman tree and subsampling ------------------------------------------------------------------
def test_huffman_codes() -> None:
    counts = np.array([500, 300, 120, 60, 10, 5, 3, 2, 1], np.int64)
    points, codes, lengths = huffman_tree(counts)
    words = [tuple(codes[w, : lengths[w]]) for w in range(len(counts))]
    assert lengths[0] == lengths.min() and lengths[0] < lengths[-1]
    assert all(lengths[i] <= lengths[j] for i in range(len(counts)) for j in range(i + 1, len(counts)))
    for i, a in enumerate(words):  # prefix-free
        for j, b in enumerate(words):
            assert i == j or a != b[: len(a)]
    # every path starts at the root (the last inner node) and uses inner nodes only
    assert all(points[w, 0] == len(counts) - 2 for w in range(len(counts)))
    assert points.max() == len(counts) - 2
    # Kraft equality: a full binary tree's code lengths satisfy sum 2^-l = 1
    assert sum(2.0 ** -l for l in lengths) == pytest.approx(1.0)


def test_hierarchical_softmax_probabilities_sum_to_one() -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 1000, size=40)
    points, codes, lengths = huffman_tree(counts)
    nodes = rng.normal(size=(len(counts) - 1, 8))
    for _ in range(3):
        hidden = rng.normal(size=8)
        total = 0.0
        for word in range(len(counts)):
            p = 1.0
            for step in range(lengths[word]):
                score = nodes[points[word, step]] @ hidden
                p *= sigmoid(score) if codes[word, step] == 0 else sigmoid(-score)  # label 1 - code
            total += p
        assert total == pytest.approx(1.0, rel=1e-9)


def test_keep_probabilities_follow_the_formula(tmp_path: Path) -> None:
    counts = np.array([10000, 1000, 100, 10, 1], np.int64)
    t = 1e-3
    keep = keep_probabilities(counts, t)
    total = counts.sum()
    for count, kept in zip(counts, keep):
        f = count / total
        assert kept == pytest.approx(min(1.0, (math.sqrt(f / t) + 1) * t / f))
    assert keep[0] < keep[1] < 1 and keep[-1] == 1.0
    assert np.all(keep_probabilities(counts, 0.0) == 1)
    # the task keeps about that share of each word's occurrences
    corpus = tmp_path / "corpus.txt"
    words = ["common"] * 20000 + ["rare"] * 200
    random.Random(0).shuffle(words)
    corpus.write_text("\n".join(" ".join(words[i:i + 20]) for i in range(0, len(words), 20)), encoding="utf-8")
    task = EmbeddingsTask.from_data(config(corpus, sample=1e-2))
    arrays = task.device_arrays(torch.device("cpu"))
    ids, _, _ = task.subsample(0, 0, arrays)
    expected = keep_probabilities(task.counts, 1e-2)
    common = task.vocab.stoi["common"]
    share = float((ids == common).sum()) / task.counts[common]
    assert share == pytest.approx(expected[common], abs=0.02)


# --- learning ---------------------------------------------------------------------------------------
def two_topic_corpus(path: Path, lines: int = 1500, seed: int = 0) -> Path:
    rng = random.Random(seed)
    text = []
    for _ in range(lines):
        topic = TOPIC_A if rng.random() < 0.5 else TOPIC_B
        text.append(" ".join(rng.choices(topic, k=rng.randint(4, 10))))
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def train_vectors(corpus: Path, tmp_path: Path, threads: int = 1, **model) -> WordVectors:
    from textnn.experiment import train

    cfg = config(corpus, **model)
    cfg.train.threads = threads
    run, _ = train(cfg, tmp_path / f"run_{'_'.join(map(str, model.values()))}")
    words, vectors = read_vectors(run.path / "vectors.txt")
    return WordVectors(words, vectors)


@pytest.mark.parametrize("architecture,loss,threads", [("skipgram", "negative", 1), ("cbow", "negative", 1),
                                                       ("skipgram", "hierarchical", 1), ("cbow", "hierarchical", 2),
                                                       ("cbow", "negative", 2)])
def test_planted_topics_are_learned(tmp_path: Path, architecture: str, loss: str, threads: int) -> None:
    corpus = two_topic_corpus(tmp_path / "topics.txt")
    vectors = train_vectors(corpus, tmp_path, threads, architecture=architecture, loss=loss, sample=0.0, alpha=0.05)
    same = [w for w in TOPIC_A + TOPIC_B
            if (vectors.neighbors(w, 1)[0][0] in TOPIC_A) == (w in TOPIC_A)]
    assert len(same) >= 18  # nearly every word's nearest neighbour is from its own topic
    a, b = [vectors.find(w) for w in TOPIC_A], [vectors.find(w) for w in TOPIC_B]
    within = (vectors.unit[a] @ vectors.unit[a].T).mean()
    across = (vectors.unit[a] @ vectors.unit[b].T).mean()
    assert within > across + 0.3


def test_vector_files_round_trip_through_our_reader(tmp_path: Path) -> None:
    from textnn.experiment import load_run, train

    corpus = two_topic_corpus(tmp_path / "topics.txt", lines=200)
    run, _ = train(config(corpus), tmp_path / "run")
    _, task, model = load_run(run.path)
    expected = model.vectors()
    for name in ("vectors.txt", "vectors.bin"):
        words, vectors = read_vectors(run.path / name)
        assert words == task.vocab.itos
        np.testing.assert_array_equal(vectors, expected)


@pytest.mark.parity
def test_vector_files_load_in_gensim(tmp_path: Path) -> None:
    gensim_models = pytest.importorskip("gensim.models")
    from textnn.experiment import load_run, train

    corpus = two_topic_corpus(tmp_path / "topics.txt", lines=200)
    run, _ = train(config(corpus), tmp_path / "run")
    _, task, model = load_run(run.path)
    for name, binary in (("vectors.txt", False), ("vectors.bin", True)):
        kv = gensim_models.KeyedVectors.load_word2vec_format(str(run.path / name), binary=binary)
        assert list(kv.index_to_key) == task.vocab.itos
        np.testing.assert_array_equal(kv.vectors, model.vectors())


# --- metrics ----------------------------------------------------------------------------------------
def planted_vectors(seed: int = 0) -> WordVectors:
    """country -> capital is one fixed offset; other words are random."""
    rng = np.random.default_rng(seed)
    offset = rng.normal(size=50) * 2
    words, rows = [], []
    for country, capital in (("France", "Paris"), ("germany", "berlin"), ("italy", "rome"), ("spain", "madrid")):
        base = rng.normal(size=50)
        words += [country, capital]
        rows += [base, base + offset]
    for i in range(20):
        words.append(f"noise{i}")
        rows.append(rng.normal(size=50))
    words.append("Oslo")  # the least frequent word: outside a small top_n
    rows.append(rng.normal(size=50))
    return WordVectors(words, np.array(rows, np.float32))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_analogies_3cosadd_3cosmul_sections_and_coverage(tmp_path: Path) -> None:
    vectors = planted_vectors()
    path = write(tmp_path / "q.txt", ": capital-common-countries\nfrance paris germany berlin\n"
                 "italy rome spain madrid\nitaly rome spain noise3\n: gram1-fake\ngermany berlin italy rome\n"
                 "germany berlin norway oslo\n")
    result = evaluate_analogies(vectors, read_analogies(path), top_n=len(vectors.words) - 1)
    assert result["questions"] == 5 and result["answered"] == 4  # norway is unknown: counted, not dropped
    assert result["coverage"] == pytest.approx(4 / 5)
    assert result["sections"]["capital-common-countries"]["3cosadd"] == pytest.approx(2 / 3)
    assert result["sections"]["gram1-fake"]["answered"] == 1
    assert result["semantic_3cosadd"] == pytest.approx(2 / 3) and result["syntactic_3cosadd"] == 1.0
    assert result["3cosadd"] == pytest.approx(3 / 4) and result["3cosmul"] == pytest.approx(3 / 4)
    # only the four most frequent words are searched: one question has all its words among them
    small = evaluate_analogies(vectors, read_analogies(path), top_n=4)
    assert small["answered"] == 1 and small["coverage"] == pytest.approx(1 / 5)


def test_similarity_spearman_and_missing_words(tmp_path: Path) -> None:
    vectors = planted_vectors()
    pairs = [("paris", "france"), ("paris", "berlin"), ("noise1", "madrid"), ("rome", "italy")]
    scores = [vectors.similarity(a, b) for a, b in pairs]
    order = np.argsort(np.argsort(scores))  # human scores in the same order as the cosines: rho = 1
    text = "# a comment\n" + "".join(f"{a}\t{b}\t{float(r)}\n" for (a, b), r in zip(pairs, order))
    path = write(tmp_path / "sim.tsv", text + "paris\tunknownword\t3.0\n")
    result = evaluate_similarity(vectors, read_similarity_pairs(path))
    assert result["spearman"] == pytest.approx(1.0)
    assert result["missing"] == 1 and result["coverage"] == pytest.approx(4 / 5)


def test_neighbors_and_analogy_lookups() -> None:
    vectors = planted_vectors()
    assert vectors.analogy("france", "paris", "germany", 1)[0][0] == "berlin"
    assert vectors.neighbors("paris", 3)[0][0] != "Paris"  # the word itself is left out
    with pytest.raises(TextnnError, match="'zzz' is not in the vocabulary"):
        vectors.neighbors("zzz")


# --- bad input --------------------------------------------------------------------------------------
def test_empty_corpus_and_min_count_leaving_nothing(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.txt", "\n  \n")
    with pytest.raises(TextnnError, match="empty"):
        EmbeddingsTask.from_data(config(empty))
    rare = write(tmp_path / "rare.txt", "a b c\nd e f\n")
    raw = {"task": "embeddings", "data": {"format": "text", "train": str(rare), "min_freq": 3},
           "model": {"name": "word2vec"}}
    with pytest.raises(TextnnError, match="min_freq=3"):
        EmbeddingsTask.from_data(config_from_dict(raw, "test"))


def test_malformed_evaluation_files_name_the_line(tmp_path: Path) -> None:
    analogy = write(tmp_path / "q.txt", ": s\na b c d\na b c\n")
    with pytest.raises(TextnnError, match=r"q.txt:3: expected four words"):
        read_analogies(analogy)
    similarity = write(tmp_path / "s.tsv", "# c\na\tb\t1.0\na\tb\tmuch\n")
    with pytest.raises(TextnnError, match=r"s.tsv:3: score 'much'"):
        read_similarity_pairs(similarity)
    fields = write(tmp_path / "f.tsv", "a b 1.0\n")
    with pytest.raises(TextnnError, match=r"f.tsv:1: expected 'word1<TAB>word2<TAB>score'"):
        read_similarity_pairs(fields)


def test_config_checks() -> None:
    with pytest.raises(TextnnError, match="model.architecture"):
        config(Path("x.txt"), architecture="glove")
    with pytest.raises(TextnnError, match="data.tokenizer"):
        config_from_dict({"task": "embeddings", "data": {"format": "text", "train": "x", "tokenizer": "word"},
                          "model": {"name": "word2vec"}}, "test")
    with pytest.raises(TextnnError, match="word2vec cannot serve task classification"):
        config_from_dict({"task": "classification", "data": {"train": "x"}, "model": {"name": "word2vec"}}, "test")


def test_a_resumed_run_ends_with_the_vectors_of_an_uninterrupted_one(tmp_path: Path) -> None:
    from textnn.experiment import train

    corpus = two_topic_corpus(tmp_path / "topics.txt", lines=300)
    whole = config(corpus, batch_words=64)
    whole.train.epochs = 2
    full_run, full = train(whole, tmp_path / "full")
    assert full.steps > 4
    cut = config(corpus, batch_words=64)
    cut.train.epochs, cut.train.max_steps = 2, 3  # stops mid-epoch, after a checkpoint of step 3
    cut.train.keep_checkpoint = "last"  # a finished run, trained further
    run, first = train(cut, tmp_path / "cut")
    assert first.stopped == "max_steps" and first.steps == 3
    more = config(corpus, batch_words=64)
    more.train.epochs = 2
    _, resumed = train(more, tmp_path / "cut", resume=True)
    assert resumed.steps == full.steps
    np.testing.assert_array_equal(read_vectors(run.path / "vectors.bin")[1],
                                  read_vectors(full_run.path / "vectors.bin")[1])
    # and the same training records: the mean loss of the same steps each, the stopped run's last-step
    # record (step 3) gone, and the last step's at the end of both
    rows = [[{k: v for k, v in r.items() if k not in ("seconds", "words_per_s")} for r in path.read_metrics()]
            for path in (run, full_run)]
    assert rows[0] == rows[1]
    train_steps = [r["step"] for r in rows[1] if r["split"] == "train"]
    assert train_steps[:3] == [1, 2, 4] and train_steps[-1] == full.steps


# --- worker processes (train.threads > 1) -----------------------------------------------------------
def test_one_worker_process_trains_what_this_process_would(tmp_path: Path, monkeypatch) -> None:
    """A step's draws depend on (epoch, step) only, so one worker, which takes the steps in order,
    repeats the single-process run exactly; several workers differ only in the order of the updates."""
    from textnn.experiment import train
    from textnn.training import word2vec

    corpus = two_topic_corpus(tmp_path / "topics.txt", lines=300)
    runs = {}
    for name, processes in (("here", 0), ("worker", 1)):
        monkeypatch.setattr(word2vec, "worker_processes", lambda device, threads, count=processes: count)
        cfg = config(corpus, architecture="cbow", batch_words=64)
        cfg.train.epochs = 2
        runs[name] = train(cfg, tmp_path / name)
    assert runs["worker"][1].steps == runs["here"][1].steps > 8
    np.testing.assert_array_equal(read_vectors(runs["worker"][0].path / "vectors.bin")[1],
                                  read_vectors(runs["here"][0].path / "vectors.bin")[1])


def test_ctrl_c_stops_two_workers_and_the_run_resumes(tmp_path: Path, monkeypatch) -> None:
    import multiprocessing
    import os
    import signal

    from textnn.experiment import train
    from textnn.runs import RunDir
    from textnn.training import word2vec
    from textnn.training.trainer import TrainingInterrupted

    received = []
    receive = word2vec._Workers.receive

    def receive_then_interrupt(self):
        received.append(receive(self))
        if len(received) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # to the trainer only: the workers never see it
        return received[-1]

    monkeypatch.setattr(word2vec._Workers, "receive", receive_then_interrupt)
    corpus = two_topic_corpus(tmp_path / "topics.txt", lines=600)
    cfg = config(corpus, batch_words=64)
    cfg.train.threads, cfg.train.epochs = 2, 2
    with pytest.raises(TrainingInterrupted):
        train(cfg, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert run.status()["status"] == "interrupted"
    stopped_at = run.status()["step"]
    assert 3 <= stopped_at <= 3 + 2 * 2  # the steps already given out finish; no more are given
    assert not multiprocessing.active_children()  # the workers are gone
    assert not (run.path / "vectors.bin").exists()
    monkeypatch.setattr(word2vec._Workers, "receive", receive)
    _, resumed = train(cfg, tmp_path / "run", resume=True)
    assert resumed.stopped == "completed" and resumed.steps == run.status()["total_steps"]
    assert resumed.steps > stopped_at
