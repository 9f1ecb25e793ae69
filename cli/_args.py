"""Argument types of the command line: numbers checked for range at parse time, so that a bad
value is a one-line error (exit 2) before any work starts."""

from __future__ import annotations

import argparse
import math


def integer(low: int | None = None, high: int | None = None):
    """An ``argparse`` type: an integer in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def real(low: float, high: float, *, open_low: bool = False):
    """An ``argparse`` type: a finite number in ``[low, high]`` (``(low, high]`` if ``open_low``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value > high or value < low or (open_low and value == low):
            bracket = "(" if open_low else "["
            raise argparse.ArgumentTypeError(f"must be in {bracket}{low:g}, {high:g}], got {text}")
        return value

    return parse


SEED = integer(0, 2**31 - 1)
"""Seeds: non-negative and within 32 bits (JAX's keys in float32 mode too)."""


def student_df(text: str) -> float | None:
    """An ``argparse`` type: Student-t degrees of freedom, a number in (0, 1e6], or ``learned``
    (None: the model's latent degrees of freedom)."""
    if text == "learned":
        return None
    try:
        return real(0.0, 1e6, open_low=True)(text)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{err} (or 'learned')") from None
