"""A one-line textual progress bar on stderr, updated once per compiled chunk of steps."""

from __future__ import annotations

import sys
import time


class ProgressLine:
    """``label [#####.....] done/total  loss ...  rate steps/s``, rewritten in place.

    Args:
        label: text before the bar.
        total: number of steps.
        enabled: print nothing when False.
        stream: where to write (default ``sys.stderr``).
        width: characters in the bar.
    """

    def __init__(
        self, label: str, total: int, *, enabled: bool = True, stream=None, width: int = 30
    ):
        self.label = label
        self.total = max(int(total), 1)
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.width = width
        self.start = time.perf_counter()

    def update(
        self, done: int, *, loss: float | None = None, validation: float | None = None
    ) -> None:
        """Show ``done`` of ``total`` steps, the latest loss and validation score."""
        if not self.enabled:
            return
        filled = int(self.width * done / self.total)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        text = f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total}"
        if loss is not None:
            text += f"  loss {loss:.6g}"
        if validation is not None:
            text += f"  validation {validation:.6g}"
        text += f"  {done / elapsed:.0f} steps/s"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        """End the line."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
