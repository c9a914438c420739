"""One engine, many callers: concurrent generate calls become one engine batch.

Frameworks call a rollout from many threads (an HTTP server) or coroutines (verl's agent
loops), each with a few prompts. ``LLM.generate`` is one engine batch and must not be entered
twice at once, so the calls are queued and a single worker thread hands everything queued to
one ``generate``: the engine's continuous batching then sees the whole load, as it would from
one caller. Batching changes no bit of a deterministic request (the contract's batch
invariance, docs/contract.md), so which calls happened to share a batch does not matter.

Work that must not overlap a batch (a weight update, scoring) runs on the same thread
between batches (``call``).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple


class Batcher:
    # Calls that arrive together (verl's agent loops start all their coroutines at once) must
    # share one batch: a batch runs to its end before the next starts, so a first call taken
    # alone would make all the others wait a whole batch. The worker therefore takes a batch
    # only once the queue has not grown for LINGER_S (at most MAX_LINGER_S after the first
    # call) — a few milliseconds, against batches that take seconds.
    LINGER_S = 0.002
    MAX_LINGER_S = 0.05

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: List[Tuple[str, Any, cf.Future]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="detllm-batcher", daemon=True)
        self._thread.start()

    # ---- callers (any thread) ----
    def generate_future(self, prompts: Sequence[Any], params: Sequence[Any]) -> cf.Future:
        """Queues prompts (one SamplingParams each); the future's result is their
        RequestOutputs, in order."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams")
        return self._put("generate", (list(prompts), list(params)))

    def generate(self, prompts: Sequence[Any], params: Sequence[Any]) -> list:
        return self.generate_future(prompts, params).result()

    def call_future(self, fn: Callable[[], Any]) -> cf.Future:
        """Runs fn() on the engine thread, between batches."""
        return self._put("call", fn)

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.call_future(fn).result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    # ---- the engine thread ----
    def _put(self, kind: str, payload: Any) -> cf.Future:
        f: cf.Future = cf.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the rollout engine is closed")
            self._queue.append((kind, payload, f))
            self._wake.notify()
        return f

    def _take(self) -> Optional[List[Tuple[str, Any, cf.Future]]]:
        """Everything queued up to the first exclusive call (or that call alone)."""
        with self._lock:
            while not self._queue and not self._closed:
                self._wake.wait()
            if not self._queue:
                return None
            if self._queue[0][0] == "call":
                return [self._queue.pop(0)]
            self._linger()
            n = 0
            while n < len(self._queue) and self._queue[n][0] == "generate":
                n += 1
            taken, self._queue = self._queue[:n], self._queue[n:]
            return taken

    def _linger(self) -> None:
        """With the lock held: waits while more calls keep arriving (see LINGER_S)."""
        deadline = time.monotonic() + self.MAX_LINGER_S
        seen = len(self._queue)
        while not self._closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(min(self.LINGER_S, left))
            if len(self._queue) == seen:
                return
            seen = len(self._queue)

    def _loop(self) -> None:
        while True:
            work = self._take()
            if work is None:
                return
            if work[0][0] == "call":
                _, fn, f = work[0]
                if f.set_running_or_notify_cancel():
                    try:
                        f.set_result(fn())
                    except BaseException as e:  # handed to the caller
                        f.set_exception(e)
                continue
            self._run_batch(work)

    def _run_batch(self, work) -> None:
        prompts, params, spans = [], [], []
        for _, (p, sp, ), f in work:
            spans.append((len(prompts), len(p), f))
            prompts += p
            params += sp
        try:
            outs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        except BaseException:
            # One bad request must not fail the others that shared the batch: run each call
            # on its own, so each gets its own result or its own error.
            for (start, n, f) in spans:
                if not f.set_running_or_notify_cancel():
                    continue
                try:
                    f.set_result(self.llm.generate(prompts[start:start + n], params[start:start + n],
                                                   use_tqdm=False))
                except BaseException as e:
                    f.set_exception(e)
            return
        for start, n, f in spans:
            if f.set_running_or_notify_cancel():
                f.set_result(outs[start:start + n])
