"""Test set-up: 8 forced host devices for sharding tests, and the real-data fixture."""
import os
import pathlib

# Must happen before jax is imported anywhere.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

import review_fixtures

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_data_dir() -> pathlib.Path:
  """The real datasets: $DOCENT_JAX_DATA, or ../shared/data beside the repository. Fails when missing."""
  path = pathlib.Path(os.environ.get("DOCENT_JAX_DATA", REPO_ROOT.parent / "shared" / "data"))
  if not path.is_dir():
    pytest.fail(f"Real-data tests need the shared datasets at {path} (set DOCENT_JAX_DATA).")
  return path


@pytest.fixture(scope="session")
def reviews_dir(tmp_path_factory) -> pathlib.Path:
  """The tiny review corpus of `review_fixtures`."""
  return review_fixtures.write_tiny_reviews(tmp_path_factory.mktemp("reviews"))


@pytest.fixture(scope="session")
def reviews_tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("reviews_tfds")
