"""A random subset of the training examples: learning curves over the number of labelled examples.

Transfer learning is judged where labels are few (Howard & Ruder 2018, Figure 3: validation error
against the number of labelled training examples), so a run may train on N examples of its training
file drawn at random. The draw depends on the seed alone, so runs of different models with the same
seed see the same examples (a paired comparison), and runs with other seeds see other examples.
"""

from __future__ import annotations

import numpy as np

from textnn.errors import TextnnError


def subset_indices(total: int, size: int, seed: int, origin: str) -> list[int]:
    """`size` distinct indices of range(total), drawn uniformly with `seed`, in increasing order (the
    file's order kept). `origin` names the data for the error when the file has fewer examples."""
    if size > total:
        raise TextnnError(f"config key data.train_subset: asks for {size:,} training examples but {origin} has "
                          f"{total:,}; lower it, or use 0 for all of them")
    rng = np.random.default_rng([seed, 29])
    return sorted(int(i) for i in rng.choice(total, size=size, replace=False))


def validation_indices(total: int, share: float, seed: int, origin: str) -> list[int]:
    """The rows of a training file of `total` rows held out as validation by data.validation_split=`share`:
    round(share * total) of them (at least one, and at least one row left to train on), drawn with `seed`
    (another stream than `subset_indices`), in increasing order."""
    size = max(1, round(share * total))
    if size >= total:
        raise TextnnError(f"config key data.validation_split: {share:g} of the {total:,} training examples of "
                          f"{origin} leaves none to train on; use a smaller share or a validation file "
                          f"(data.validation)")
    rng = np.random.default_rng([seed, 31])
    return sorted(int(i) for i in rng.choice(total, size=size, replace=False))
