"""Progress on stderr for the slow commands (demo, export): one line per step, counting seconds on a terminal."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager


class Progress:
    """One line per step on stderr; on a terminal the line counts the seconds while it runs."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()

    @contextmanager
    def step(self, label: str):
        start = time.perf_counter()
        done = threading.Event()
        ticker = None
        if self.live:
            def tick():
                while not done.wait(0.2):
                    self.stream.write(f"\r  {label} ... {time.perf_counter() - start:.1f} s")
                    self.stream.flush()

            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        try:
            yield
        finally:
            done.set()
            if ticker is not None:
                ticker.join()
            self.stream.write(f"{chr(13) if self.live else ''}  {label} ... {time.perf_counter() - start:.1f} s\n")
            self.stream.flush()

    def follow(self, labels: dict[str, str]):
        """A callback for code that reports its steps by name (export_training_graph's `progress`):
        each call ends the running step and starts the named one; a call with no name ends the last."""
        running = []

        def advance(name: str | None = None) -> None:
            if running:
                running.pop().__exit__(None, None, None)
            if name is not None:
                step = self.step(labels.get(name, name))
                step.__enter__()
                running.append(step)

        return advance
