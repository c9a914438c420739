"""A progress bar for long batches: tqdm when installed, else one stderr line."""

from __future__ import annotations

import sys
import time


class Progress:
    """progress(done, total) -> True, called between engine steps (with the GIL)."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.t0 = what, total, time.monotonic()
        try:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=f"detllm {what}", unit="req", file=sys.stderr)
        except ImportError:
            self._bar = None
        self._done = 0

    def __call__(self, done: int, total: int) -> bool:
        if done == self._done and done:
            return True  # called after every engine step; draw only when a request finished
        if self._bar is not None:
            self._bar.update(done - self._done)
        else:
            rate = done / max(time.monotonic() - self.t0, 1e-9)
            sys.stderr.write(f"\rdetllm {self.what}: {done}/{total} requests ({rate:.1f}/s)")
            sys.stderr.flush()
        self._done = done
        return True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._done:
            sys.stderr.write("\n")
