"""Test set-up: 8 forced host devices for sharding tests, and the real-data fixture."""
import os
import pathlib

# Must happen before jax is imported anywhere.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_data_dir() -> pathlib.Path:
  """The real datasets: $DOCENT_JAX_DATA, or ../shared/data beside the repository. Fails when missing."""
  path = pathlib.Path(os.environ.get("DOCENT_JAX_DATA", REPO_ROOT.parent / "shared" / "data"))
  if not path.is_dir():
    pytest.fail(f"Real-data tests need the shared datasets at {path} (set DOCENT_JAX_DATA).")
  return path
