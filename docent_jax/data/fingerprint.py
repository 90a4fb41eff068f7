"""Fingerprints of loaded datasets: counts and content digests, so that a workdir can tell changed data.

A checkpoint's rows (entity tables, relation embeddings, label heads) belong to the ids it was trained
on; the same path holding other data must not be evaluated with it. Counts say what changed in
words; digests catch a change that keeps every count (a renamed entity, an edited description).
"""
from collections.abc import Iterable, Mapping
import hashlib
from typing import Any

import numpy as np

Fingerprint = dict[str, int | str]


def digest(values: Iterable[Any]) -> str:
  """A short hash of a sequence of strings or of numpy arrays (their dtype, shape and bytes)."""
  hasher = hashlib.sha256()
  for value in values:
    if isinstance(value, np.ndarray):
      hasher.update(f"{value.dtype}{value.shape}".encode())
      hasher.update(np.ascontiguousarray(value).tobytes())
    else:
      hasher.update(str(value).encode())
    hasher.update(b"\x1f")
  return hasher.hexdigest()[:16]


def differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
  """'<key>: <recorded> -> <current>' for every entry that differs (digests as 'changed')."""
  changes = []
  for key in sorted(set(recorded) | set(current)):
    old, new = recorded.get(key), current.get(key)
    if old != new:
      changes.append(f"{key} changed" if key.endswith("_digest") and old and new else f"{key}: {old} -> {new}")
  return changes
