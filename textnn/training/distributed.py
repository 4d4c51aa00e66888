"""Data-parallel training over several processes, started by torchrun.

    torchrun --standalone --nproc_per_node N -m textnn train CONFIG [overrides]

torchrun starts N copies of the command and tells each its place in the environment (RANK,
WORLD_SIZE, LOCAL_RANK). `session` joins them into one process group (gloo on the CPU, NCCL on
CUDA, one GPU per process: cuda:LOCAL_RANK); without torchrun, or with one process, nothing here
does anything and `world()` is 1.

What each process does (the trainer, training/trainer.py, follows these rules):

- Data. Every process builds the same epoch list of micro-batches (the tasks order it by (seed,
  epoch) alone). One optimizer step takes the next `grad_accum * N` micro-batches of that list and
  process r runs micro-batches r, r + N, r + 2N, ... of them (`share`), so the N processes together
  read exactly the micro-batches that ONE process with `grad_accum * N` reads in that step, and the
  epoch has the same number of steps on every process. The last step of an epoch may have fewer
  micro-batches than processes: nothing is dropped or repeated; a process left without one runs the
  step's first micro-batch with weight 0, only so that it takes part in the gradient all-reduce.
- Stateful language-model streams (`data.stateful`) cannot be dealt out window by window (each
  window continues the one before it in the same rows). Their stream is laid out as N *
  batch_size rows and process r reads rows [r * batch_size, (r + 1) * batch_size) of every window,
  carrying its own state (`StreamRowBlocks`): together, one process reading all N * batch_size rows.
- Gradient. The task's loss is a SUM; it is divided by the count of loss terms of the whole step over
  all processes, so the gradient is that of one batch of all the step's examples (see the trainer).
- Writing. Process 0 alone writes the run directory (config, checkpoints, metrics.jsonl, weights,
  report) and prints; the others read it (`runs.FollowerRunDir`) and show no progress bar.
- Evaluation. Process 0 evaluates while the others wait (`on_main`), and sends them the metrics, from
  which every process takes the same decisions (best step, early stopping, NT-ASGD's switch).
- Stopping. A Ctrl-C, or the time limit, seen by any process stops all of them after the same step.
- Carried state. Each process's carried state (its rows' recurrent state or memory) is gathered on
  process 0 for every checkpoint (`gather_states`), and a resumed process r takes back its own.
- Random numbers. Process 0 keeps the generators of a one-process run (its states are the ones the
  checkpoint saves); process r > 0 is reseeded from (seed, r, step) at the start and at every
  checkpoint (`reseed`), so its dropout differs from process 0's and a resumed run draws the same.
"""

from __future__ import annotations

import inspect
import json
import os
import random
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from textnn.data.streams import LMBatch, StreamBatches, _LazyBatches
from textnn.errors import TextnnError

T = TypeVar("T")

COLLECTIVE_TIMEOUT = timedelta(hours=2)


def launched() -> bool:
    """Whether torchrun (or another launcher that sets its variables) started this process."""
    return all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def world() -> int:
    """How many processes train together (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's place in the process group (0 without one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    """Process 0, the one that writes files and prints (also before and after `session`)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return not launched() or int(os.environ["RANK"]) == 0


@contextmanager
def session(device: torch.device) -> Iterator[None]:
    """Join the process group torchrun set up, for the duration of the block, and leave it after.

    Without torchrun, with WORLD_SIZE=1, or when the caller has already made a process group, it
    does nothing. `device` picks the backend: NCCL for CUDA (each process on cuda:LOCAL_RANK),
    gloo otherwise.
    """
    if not launched() or int(os.environ["WORLD_SIZE"]) == 1 or dist.is_initialized():
        yield
        return
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # The others wait in a collective while process 0 evaluates (dev during training, dev and test at the
    # end), which may take longer than torch's default timeout (10 or 30 minutes); a process that dies is
    # still noticed at once, by torchrun, so a long timeout only delays noticing a true hang.
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=COLLECTIVE_TIMEOUT)
    try:
        yield
        dist.barrier()  # leave together: process 0 may still be testing the result while the others are done
    except Exception as err:  # a process lost outside the steps (while the run is made, at the last barrier)
        lost = peer_lost(err)
        if lost is None:
            raise
        raise lost from None
    finally:
        dist.destroy_process_group()


def peer_lost(err: BaseException, run_path: object = None, checkpoint: bool = False) -> TextnnError | None:
    """The one-line error for `err` when it is a collective that failed because another process of the
    group is gone (killed, out of memory, failed), else None.

    gloo and NCCL report a lost peer as a RuntimeError from deep inside the collective ("Connection reset
    by peer"); the checkpoint is written whole or not at all by process 0, so whatever step the others
    stopped at, the run's last checkpoint (`checkpoint`: whether there is one) can be resumed exactly.
    `run_path`: the run, to name in the way on; None where it is not known yet.
    """
    if world() == 1 or not isinstance(err, RuntimeError) or isinstance(err, TextnnError):
        return None
    text = str(err)
    if not (isinstance(err, dist.DistError) or any(sign in text for sign in ("gloo", "NCCL", "Connection reset",
                                                                             "Connection closed"))):
        return None
    others = f"process {1 - rank()}" if world() == 2 else f"one of the other {world() - 1} processes"
    if run_path is None:
        way_on = "nothing was trained yet: start the training again"
    elif checkpoint:
        way_on = (f"the run's last checkpoint is intact (written whole or not at all): continue with "
                  f"`{command()} train CONFIG --run-dir {run_path} --resume`")
    else:
        way_on = (f"no checkpoint was written yet: start again with `{command()} train CONFIG --run-dir {run_path}`"
                  f" and --resume (which starts it over)")
    return TextnnError(f"process {rank()} of {world()}: {others} stopped (killed or failed; torchrun's summary "
                       f"names it and how it ended), so the processes cannot go on together; {way_on}")


def local_device(device: torch.device) -> torch.device:
    """The device this process trains on: cuda:LOCAL_RANK for CUDA under torchrun, else `device`."""
    if world() == 1 or device.type != "cuda":
        return device
    local = int(os.environ["LOCAL_RANK"])
    if device.index is not None and device.index != local:
        raise TextnnError(f"config key train.device: '{device}' names one GPU, but under torchrun each process "
                          f"uses its own (cuda:LOCAL_RANK); set train.device=cuda or auto")
    return torch.device("cuda", local)


def command() -> str:
    """How to start this run's processes again (for messages): `textnn` or the torchrun command."""
    if world() == 1:
        return "textnn"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world()))  # processes on this machine
    nodes = f"--nnodes {world() // local} " if world() > local else ""
    return f"torchrun {nodes}--nproc_per_node {local} -m textnn"


def _comm_device() -> torch.device:
    # NCCL moves CUDA tensors only; gloo moves CPU tensors.
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


# --- collectives (each a no-op for one process) --------------------------------------------------------

def all_reduce_sum(value: float) -> float:
    """The sum of `value` over all processes."""
    if world() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(tensor)
    return float(tensor.item())


def any_process(*flags: bool) -> tuple[bool, ...]:
    """For each flag: whether it is set on any process (so that all act on it together)."""
    if world() == 1:
        return flags
    tensor = torch.tensor([float(flag) for flag in flags], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(tensor)
    return tuple(bool(value > 0) for value in tensor.tolist())


def gather_states(state: object) -> list[object]:
    """Every process's `state` (None, a tensor, or tuples / lists of them, the same layout and shapes on
    every process: a stateful stream's rows are batch_size on each), in process order.

    Process 0 writes the checkpoint, so it must hold the state each process carries into its next
    window; tensors travel as tensors (all_gather), nothing is pickled.
    """
    if world() == 1:
        return [state]
    local: list[torch.Tensor] = []
    _map_tensors(state, lambda tensor: local.append(tensor) or tensor)
    gathered: list[list[torch.Tensor]] = [[] for _ in range(world())]
    for tensor in local:
        mine = tensor.detach().to(_comm_device()).contiguous()
        parts = [torch.empty_like(mine) for _ in range(world())]
        dist.all_gather(parts, mine)
        for process, part in enumerate(parts):
            gathered[process].append(part.cpu())
    return [_map_tensors(state, lambda _, parts=iter(tensors): next(parts)) for tensors in gathered]


def _map_tensors(state: object, fn: Callable[[torch.Tensor], torch.Tensor]) -> object:
    """`state` with `fn` applied to each of its tensors, in order (tuples and lists kept as they are)."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, (tuple, list)):
        return type(state)(_map_tensors(item, fn) for item in state)
    return state


def barrier() -> None:
    if world() > 1:
        dist.barrier()


def _broadcast_text(text: str | None) -> str:
    """Process 0's `text` on every process (UTF-8 bytes as a tensor: nothing is pickled)."""
    data = text.encode("utf-8") if is_main() else b""
    size = torch.tensor([len(data)], dtype=torch.int64, device=_comm_device())
    dist.broadcast(size, 0)
    if is_main():
        buffer = torch.tensor(list(data), dtype=torch.uint8, device=_comm_device())
    else:
        buffer = torch.empty(int(size.item()), dtype=torch.uint8, device=_comm_device())
    dist.broadcast(buffer, 0)
    return bytes(buffer.cpu().tolist()).decode("utf-8")


def on_main(fn: Callable[[], T]) -> T:
    """Run `fn` on process 0 alone while the others wait; every process gets its result or its error.

    Process 0 gets `fn()` itself; the others a JSON copy of it (so it must be JSON-able: metrics,
    numbers, None). A TextnnError that `fn` raises is raised on every process with the same message,
    so that all stop rather than wait for a process that has left; any other exception is re-raised
    on process 0, and the others stop with a TextnnError that points to it.
    """
    if world() == 1:
        return fn()
    result, error, outcome = None, None, None
    if is_main():
        try:
            result = fn()
            outcome = json.dumps({"result": result})
        except TextnnError as err:
            error, outcome = err, json.dumps({"error": str(err)})
        except BaseException as err:
            error, outcome = err, json.dumps({"failed": f"{type(err).__name__}: {err}"})
    shared = json.loads(_broadcast_text(outcome))
    if error is not None:
        raise error
    if "error" in shared:
        raise TextnnError(shared["error"])
    if "failed" in shared:
        raise TextnnError(f"process 0 failed ({shared['failed']}); see its traceback above")
    return result if is_main() else shared["result"]


# --- data ----------------------------------------------------------------------------------------------

def deal(group: Sequence, rank: int, world: int) -> tuple[list, float]:
    """Process `rank`'s micro-batches of one step's `group` and their weight (see the module doc).

    Micro-batches r, r + N, ... of the group; a process that gets none (an epoch's short last step)
    gets the group's first micro-batch with weight 0: it runs forward and backward so that the
    gradient all-reduce, which needs every process, completes, and adds nothing to the gradient.
    """
    mine = list(group[rank::world])
    return (mine, 1.0) if mine else ([group[0]], 0.0)


def share(group: Sequence) -> tuple[list, float]:
    """This process's micro-batches of one step, and their weight (`deal` for this process)."""
    return deal(group, rank(), world())


class StreamRowBlocks(_LazyBatches):
    """A stateful stream's windows for N processes: item k * N + r is window k's rows of process r.

    `batches` holds the windows over N * rows contiguous rows; process r owns rows [r * rows,
    (r + 1) * rows). Interleaved this way, `deal` hands process r exactly its own rows of each
    window, in order, so that the state it carries from one window to the next is its own rows'.
    Built on access, like the windows themselves.
    """

    def __init__(self, batches: StreamBatches, rows: int, processes: int):
        self.batches, self.rows, self.processes = batches, rows, processes

    def __len__(self) -> int:
        return len(self.batches) * self.processes

    def batch(self, index: int) -> LMBatch:
        window, block = divmod(index, self.processes)
        batch = self.batches[window]
        rows = slice(block * self.rows, (block + 1) * self.rows)
        mask = batch.mask[rows]  # [N*B, T] -> [B, T]
        return replace(batch, ids=batch.ids[rows], targets=batch.targets[rows], mask=mask,  # [B, T] each
                       num_targets=int(mask.sum()))


def stream_row_blocks(batches: StreamBatches, rows: int) -> StreamBatches | StreamRowBlocks:
    """A stateful stream's windows as `StreamRowBlocks` for this run's processes (unchanged for one).

    `batches` must have been laid out as world() * rows rows.
    """
    processes = world()
    if processes == 1:
        return batches
    if len(batches) and batches[0].ids.size(0) != processes * rows:
        raise TextnnError(f"the training stream is too short to be read as {processes} processes x "
                          f"train.batch_size={rows} rows; lower train.batch_size or use fewer processes")
    return StreamRowBlocks(batches, rows, processes)


# --- model and random numbers --------------------------------------------------------------------------

_DDP_OPTIONS = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters


class DataParallel(torch.nn.parallel.DistributedDataParallel):
    """DistributedDataParallel that also lends its module's own methods (a tagger's `nll`, `decode`).

    Tasks call `model(...)` for the forward pass, which goes through DDP; a few also call a method of
    the model on its output (the CRF's `nll`). Such a method runs on the module directly; its
    parameters' gradients are still summed across processes by DDP's hooks, which fire for every
    parameter whatever code used it.
    """

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def wrap(model: torch.nn.Module, device: torch.device) -> DataParallel | None:
    """The model in DDP when several processes train, else None.

    find_unused_parameters=False: every trained parameter must get a gradient at every step (the
    trainer checks it on the first step and names those that do not); it saves DDP a walk over the
    autograd graph per step. forward_sync_buffers=False: textnn's buffers are constants (the CRF's
    allowed-transition masks), so there is nothing to keep in step, and a collective per forward
    pass would also stall a process that runs more micro-batches than another in a step.
    """
    if world() == 1:
        return None
    # torch 2.13 renamed broadcast_buffers (now deprecated) to forward_sync_buffers; earlier 2.x know the old name.
    name = "forward_sync_buffers" if "forward_sync_buffers" in _DDP_OPTIONS else "broadcast_buffers"
    return DataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                        find_unused_parameters=False, **{name: False})


def reseed(seed: int, step: int) -> None:
    """Processes other than 0: seed Python, NumPy and torch from (seed, rank, step); process 0: nothing.

    Process 0's generators are the ones a checkpoint saves and a resume restores. The others start
    from (seed, rank, 0) and are reseeded at every checkpoint of step s from (seed, rank, s), which is
    where a run resumed from that checkpoint reseeds them too.
    """
    if rank() == 0:
        return
    derived = int(np.random.SeedSequence([seed, rank(), step]).generate_state(1)[0])
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)
