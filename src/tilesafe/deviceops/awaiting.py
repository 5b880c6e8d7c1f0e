"""``await op``: driving a DeviceOp without blocking the asyncio event loop.

On a device whose work runs asynchronously (cuda), as far as the op only enqueues device work
(launches ready to enqueue, chains of them), the awaiting coroutine enqueues it on the loop's
thread and polls the stream for a short while (small work completes before a thread could be
woken); a wait that lasts longer goes to a waiter thread while the loop serves other
coroutines. The rest of an op (a launch that must compile first, an allocation, a host step)
runs on a waiter thread. The loans end once the work is known complete, as with ``sync``.

The op is used through its driving methods only (``_enqueue``,
``_enqueue_while_only_enqueueing``, ``_drive``), so this module imports nothing of tilesafe
but the driver's streams.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

from ..driver.stream import Stream
from ..errors import Location

SPIN_SECONDS = 50e-6  # how long an await polls its stream before handing the wait to a thread


async def await_on_loop(op: Any, stream: Stream, where: Location) -> Any:
    """Await ``op`` on ``stream`` (see the module docstring); ``where`` is the awaiting
    coroutine's line."""
    try:
        finished, value = op._enqueue(stream, where, op._enqueue_while_only_enqueueing)
    except BaseException:
        stream.synchronize()
        raise
    loop = asyncio.get_running_loop()
    if not finished:  # the rest follows what was enqueued, on the same stream
        # (shielded: cancelling the await must not cancel a drive still queued for a thread)
        return await asyncio.shield(loop.run_in_executor(waiters(), _drive_holding, value,
                                                         stream, where, op))
    try:
        idle = _idle_within(stream, SPIN_SECONDS)
    except BaseException:
        stream.synchronize()
        raise
    if idle:  # returns at once (unless another thread enqueued on the stream meanwhile)
        stream.synchronize()
    else:
        # (shielded: cancelled while queued for a thread, the wait would never run, and the
        # op would be dropped with its work still running)
        await asyncio.shield(loop.run_in_executor(waiters(), _synchronize_holding, stream, op,
                                                  value))
    return value


def _synchronize_holding(stream: Stream, *held: Any) -> None:
    """``stream.synchronize()`` on a waiter thread, holding ``held`` (the op and what it hands
    back, so the memory its work uses) until the work is complete: a cancelled await drops
    its own references at once, and memory freed while the work still runs could go to
    another allocation (a free is ordered on the stream that allocated the memory, not on
    this one)."""
    stream.synchronize()


def _drive_holding(rest: Any, stream: Stream, where: Location, *held: Any) -> Any:
    """``rest._drive(stream, where)`` on a waiter thread, holding ``held`` (the op whose first
    part is enqueued) until it returns, as :func:`_synchronize_holding` does."""
    return rest._drive(stream, where)


def _idle_within(stream: Stream, seconds: float) -> bool:
    platform, deadline = stream._platform, time.perf_counter() + seconds
    while not platform.is_idle(stream):
        if time.perf_counter() > deadline:
            return False
    return True


_WAITERS: list = []


def waiters() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool of threads that drive awaited ops (created on first use)."""
    if not _WAITERS:
        _WAITERS.append(concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="tilesafe-await"))
    return _WAITERS[0]
