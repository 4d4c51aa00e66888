"""Sharding for several processes, in one process: who reads which micro-batch and which rows."""

from __future__ import annotations

import pytest
import torch

from textnn.data.streams import StreamBatches, batchify, bptt_lengths
from textnn.errors import TextnnError
from textnn.training import distributed


@pytest.mark.parametrize("size,world", [(6, 2), (5, 2), (1, 2), (7, 3), (2, 3)])
def test_the_processes_of_a_step_read_its_micro_batches_once_each(size, world):
    group = [f"batch{i}" for i in range(size)]
    shares = [distributed.deal(group, rank, world) for rank in range(world)]
    counted = [batch for mine, weight in shares if weight for batch in mine]
    assert sorted(counted) == sorted(group)  # each once, none dropped or repeated
    for rank, (mine, weight) in enumerate(shares):
        if rank < size:
            assert weight == 1.0 and mine == group[rank::world]
        else:  # nothing left for it: it runs the first one with weight 0, only to join the all-reduce
            assert weight == 0.0 and mine == [group[0]]


def test_a_stateful_stream_gives_each_process_its_own_rows_of_every_window():
    ids = torch.arange(203)
    rows, processes, bptt = 3, 2, 8
    inputs, targets, mask = batchify(ids, rows * processes, pad_id=-1)
    windows = StreamBatches(inputs, targets, mask, bptt_lengths(inputs.size(1), bptt), bptt)
    blocks = distributed.StreamRowBlocks(windows, rows, processes)
    assert len(blocks) == processes * len(windows)
    for rank in range(processes):
        own = [blocks[i] for i in range(rank, len(blocks), processes)]  # what `deal` hands this process
        assert [b.reset for b in own] == [w.reset for w in windows]
        row_text = torch.cat([b.ids for b in own], dim=1)  # [B, L]: its rows, read window after window
        assert torch.equal(row_text, inputs[rank * rows:(rank + 1) * rows])
        assert all(b.ids.size(0) == rows for b in own)
    # Together the processes predict every target of the stream once, as one process with all rows would.
    assert sum(b.count for b in blocks) == sum(w.count for w in windows) == len(ids) - 1


def test_one_process_reads_the_stream_unchanged():
    inputs, targets, mask = batchify(torch.arange(50), 4, pad_id=-1)
    windows = StreamBatches(inputs, targets, mask, bptt_lengths(inputs.size(1), 5), 5)
    assert distributed.stream_row_blocks(windows, 4) is windows


def _refuse() -> None:
    raise TextnnError("bad value")


def test_without_a_process_group_the_collectives_are_identities():
    assert distributed.world() == 1 and distributed.is_main()
    assert distributed.all_reduce_sum(2.5) == 2.5
    assert distributed.any_process(True, False) == (True, False)
    assert distributed.on_main(lambda: {"loss": 1.0}) == {"loss": 1.0}
    with pytest.raises(TextnnError, match="bad value"):
        distributed.on_main(_refuse)
    assert distributed.wrap(torch.nn.Linear(2, 2), torch.device("cpu")) is None
    assert distributed.command() == "textnn"
