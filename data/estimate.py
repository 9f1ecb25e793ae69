"""Velocity and acceleration estimation from sampled positions (Reuss et al., Sec. IV-B).

``qd`` = zero-phase low-pass of the central finite differences of ``q``; ``qdd`` = the same applied
to ``qd``. The low-pass is a Butterworth filter run forwards and backwards (``scipy.signal.filtfilt``),
which cancels its phase shift (non-causal, offline only).
"""

from __future__ import annotations

import numpy as np
import scipy.signal

DEFAULT_CUTOFF_HZ = 20.0
"""Default cut-off of the zero-phase Butterworth filter (Hz). Reuss et al. use 5 Hz at 1 kHz on the
Panda; the pendulums here swing at about 1 Hz but the swing-up's saturated efforts make fast
acceleration steps, and on the hardware-like data (60 s, seed 0) the acceleration error fell from
5 to 20 Hz for both systems (Furuta rms 25 -> 6.4 rad/s^2; 40 Hz was worse there, quantisation
noise taking over); see ``benchmarks/datasets.py`` for the figures."""
DEFAULT_ORDER = 2


def lowpass(
    x: np.ndarray,
    rate_hz: float,
    *,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    order: int = DEFAULT_ORDER,
) -> np.ndarray:
    """Zero-phase Butterworth low-pass along axis 0 (``filtfilt``; effective order ``2 order``).

    Raises:
        ValueError: cut-off not below the Nyquist frequency, or too few samples for the filter.
    """
    nyquist = 0.5 * rate_hz
    if not 0 < cutoff_hz < nyquist:
        raise ValueError(
            f"cutoff_hz must be in (0, {nyquist}) (Nyquist at {rate_hz} Hz), got {cutoff_hz}"
        )
    b, a = scipy.signal.butter(order, cutoff_hz / nyquist)
    padlen = 3 * max(len(a), len(b))
    if x.shape[0] <= padlen:
        raise ValueError(
            f"a trajectory of {x.shape[0]} samples is too short for the order-{order} filter "
            f"(needs more than {padlen})"
        )
    return scipy.signal.filtfilt(b, a, x, axis=0)


def estimate_derivatives(
    t: np.ndarray,
    q: np.ndarray,
    *,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    order: int = DEFAULT_ORDER,
) -> tuple[np.ndarray, np.ndarray]:
    """``(qd, qdd)`` (T, n) estimated from positions ``q`` (T, n) sampled at ``t`` (T,).

    Central differences (``np.gradient``, second order, one-sided at the ends) followed by the
    zero-phase Butterworth low-pass at ``cutoff_hz``, twice: ``qd = LP(D q)``, ``qdd = LP(D qd)``.
    """
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    rate = 1.0 / float(np.median(np.diff(t)))
    qd = lowpass(np.gradient(q, t, axis=0), rate, cutoff_hz=cutoff_hz, order=order)
    qdd = lowpass(np.gradient(qd, t, axis=0), rate, cutoff_hz=cutoff_hz, order=order)
    return qd, qdd
