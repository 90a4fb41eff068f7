"""Test set-up: 8 forced host devices for sharding tests, the real-data fixture, and local gs:// buckets."""
from collections.abc import Iterator
import os
import pathlib
from typing import Any

import tiny_training

# Must happen before jax is imported anywhere.
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8",
                                    tiny_training.FAST_COMPILE_XLA_FLAGS]).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The compilation cache: off in the workers (8 forced devices: `compilation_cache`), on in the commands the tests
# start on one device, as for a user.

from etils import epath
from etils.epath import gpath
import fsspec
import pytest
from xdist.scheduler import LoadScopeScheduling

from docent_jax import experiment
import gcs_server
import kg_fixtures
import review_fixtures

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# `make test` runs the suite on pytest-xdist workers, whole modules at a time (a module's fixtures are built
# once), in collection order. The modules that train whole configs go first, slowest first, so that the
# workers finish together; DOCENT-FULL's module goes with DOCENT-DUAL's, whose worker then trains the
# `docent_dual_run` fixture once for both.
SLOWEST_MODULES_FIRST = ("test_train", "test_docent_dual", "test_reliability", "test_export", "test_supcon",
                         "test_universal", "test_seeds", "test_docent_hybrid", "test_inference", "test_paper_configs",
                         "test_compile_for_tpu", "test_entity_reranking", "test_launch", "test_roberta")
MODULE_GROUPS = {"test_docent_full": "test_docent_dual"}


def _group(module_path: str) -> str:
  module = pathlib.PurePath(module_path).stem
  return MODULE_GROUPS.get(module, module)


class ModuleGroupScheduling(LoadScopeScheduling):
  """pytest-xdist's scheduling by scope, with `MODULE_GROUPS` as the scopes."""

  def _split_scope(self, nodeid: str) -> str:
    return _group(nodeid.split("::")[0])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleGroupScheduling:
  return ModuleGroupScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
  rank = {name: i for i, name in enumerate(SLOWEST_MODULES_FIRST)}
  items.sort(key=lambda item: rank.get(_group(item.nodeid.split("::")[0]), len(rank)))  # Stable: modules stay whole.


@pytest.fixture(scope="session")
def shared_data_dir() -> pathlib.Path:
  """The real datasets: $DOCENT_JAX_DATA, or ../shared/data beside the repository. Fails when missing."""
  path = pathlib.Path(os.environ.get("DOCENT_JAX_DATA", REPO_ROOT.parent / "shared" / "data"))
  if not path.is_dir():
    pytest.fail(f"Real-data tests need the shared datasets at {path} (set DOCENT_JAX_DATA).")
  return path


@pytest.fixture(scope="module")
def kg_dir(tmp_path_factory) -> pathlib.Path:
  """The tiny knowledge graph of `kg_fixtures`, written once per module that asks for it."""
  return kg_fixtures.write_tiny_kg(tmp_path_factory.mktemp("tiny_kg"))


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  """A TFDS data directory of the module's own (modules with other data define theirs)."""
  return tmp_path_factory.mktemp("tfds")


@pytest.fixture(scope="session")
def reviews_dir(tmp_path_factory) -> pathlib.Path:
  """The tiny review corpus of `review_fixtures`."""
  return review_fixtures.write_tiny_reviews(tmp_path_factory.mktemp("reviews"))


@pytest.fixture(scope="session")
def reviews_tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("reviews_tfds")


@pytest.fixture(scope="session")
def docent_dual_run(reviews_dir, reviews_tfds_dir, tmp_path_factory) -> tuple[pathlib.Path, dict[str, float]]:
  """The tiny DOCENT-DUAL config trained and evaluated once: (its workdir, its results)."""
  workdir = tmp_path_factory.mktemp("docent_dual_run")
  return workdir, experiment.train_and_evaluate(review_fixtures.tiny_config(reviews_dir, reviews_tfds_dir), workdir)


@pytest.fixture
def gcs_bucket(tmp_path, monkeypatch) -> Iterator[tuple[pathlib.Path, list[str]]]:
  """gs://bucket served from a local directory: (that directory, the paths opened through epath so far).

  epath's local backend stands in for every scheme; run from `tmp_path`, it reads 'gs://bucket/x' as
  the relative path 'gs:/bucket/x'. A read that bypasses epath is missing from the list.
  """
  monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)  # Else gs:// paths go to TensorFlow's GCS client.
  monkeypatch.chdir(tmp_path)
  bucket = tmp_path / "gs:" / "bucket"
  bucket.mkdir(parents=True)
  opened = []

  def record(open_file, path, mode):
    opened.append(os.fspath(path))
    return open_file(path, mode)

  with epath.testing.mock_epath(open=record):
    yield bucket, opened


@pytest.fixture
def gcs_emulator(tmp_path, monkeypatch) -> Iterator[str]:
  """A Cloud Storage server on localhost holding the bucket 'bucket'; yields its URL.

  Every client that can be pointed at an emulator is: Orbax's TensorStore (TENSORSTORE_GCS_HTTP_URL) and
  epath through fsspec's gcsfs (STORAGE_EMULATOR_HOST; TensorFlow's own GCS client has no endpoint setting,
  so epath is kept off it). Runs from `tmp_path`, where a path that went through pathlib ('gs:/bucket/...')
  would appear as a local directory 'gs:'.
  """
  gcs, url = gcs_server.start(monkeypatch, "bucket")
  monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", url)
  monkeypatch.setenv("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
  monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)
  monkeypatch.chdir(tmp_path)
  fsspec.get_filesystem_class("gs").clear_instance_cache()
  try:
    yield url
  finally:
    fsspec.get_filesystem_class("gs").clear_instance_cache()
    gcs.stop()
