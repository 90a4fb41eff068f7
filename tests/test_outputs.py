"""The one writer: a file is written whole or not at all, and a path that cannot be written is named before work."""
import errno
import json
import os

import pytest

from docent_jax import outputs


def _files(directory) -> list[str]:
  return sorted(p.name for p in directory.iterdir())


def test_an_error_inside_the_block_leaves_the_earlier_file_and_no_partial_file(tmp_path):
  path = tmp_path / "answers.jsonl"
  path.write_text("earlier\n")
  with pytest.raises(ValueError, match="bad line"):
    with outputs.atomic_writer(path) as file:
      file.write("half of the new\n")
      raise ValueError("bad line")
  assert path.read_text() == "earlier\n"
  assert _files(tmp_path) == ["answers.jsonl"]


def test_a_full_disk_is_one_error_naming_the_file_and_the_earlier_file_stays(tmp_path, monkeypatch):
  path = tmp_path / "results.json"
  path.write_text('{"a/test/mrr": 0.5}')

  def full_disk(descriptor):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(outputs.os, "fsync", full_disk)
  with pytest.raises(outputs.OutputError, match=f"^{path}: not written \\(No space left on device\\)"):
    outputs.merge_results(path, {"b/test/mrr": 0.25})
  assert json.loads(path.read_text()) == {"a/test/mrr": 0.5}
  assert _files(tmp_path) == ["results.json"]


def test_a_replaced_file_keeps_its_mode_and_a_new_one_is_readable(tmp_path):
  kept = tmp_path / "kept.txt"
  kept.write_text("old")
  kept.chmod(0o640)
  outputs.write_atomically(kept, "new")
  assert kept.read_text() == "new" and kept.stat().st_mode & 0o777 == 0o640
  outputs.write_atomically(tmp_path / "deeper" / "new.bin", b"\x00\x01")
  assert (tmp_path / "deeper" / "new.bin").read_bytes() == b"\x00\x01"
  assert (tmp_path / "deeper" / "new.bin").stat().st_mode & 0o444 == 0o444 & ~_umask()


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def test_merging_keeps_other_keys_and_drops_the_replaced_ones(tmp_path):
  path = tmp_path / "results.json"
  path.write_text(json.dumps({"other/x/y": 1.0, "mine/x/stale": 2.0, "mine/x/y": 3.0}))
  kept = outputs.merge_results(path, {"mine/x/y": 4.0}, replaces=lambda key: key.startswith("mine/"))
  assert kept == {"other/x/y": 1.0}
  assert json.loads(path.read_text()) == {"mine/x/y": 4.0, "other/x/y": 1.0}


def test_a_results_file_that_is_no_object_is_damaged(tmp_path):
  path = tmp_path / "results.json"
  path.write_text("[1, 2]")
  with pytest.raises(outputs.DamagedFileError, match=f"^{path} is not a results file"):
    outputs.read_results(path)
  path.write_text('{"a": 1')
  with pytest.raises(outputs.DamagedFileError, match=f"^{path} is damaged"):
    outputs.read_results(path)
  assert outputs.read_results(tmp_path / "missing.json") == {}


def test_paths_that_cannot_be_written_are_named_with_their_flag(tmp_path):
  with pytest.raises(outputs.OutputError, match=r"^--output=/proc/x: cannot write in /proc \("):
    outputs.check_writable("/proc/x", "--output")
  with pytest.raises(outputs.OutputError, match=f"^--results={tmp_path}: is a folder"):
    outputs.check_writable(tmp_path, "--results")
  # A file in folders still to be made is fine where the nearest existing folder is writable; nothing is left.
  assert outputs.check_writable(tmp_path / "a" / "b.json", "--output") == tmp_path / "a" / "b.json"
  assert _files(tmp_path) == []


def test_same_file_sees_through_relative_paths_and_links(tmp_path, monkeypatch):
  (tmp_path / "in.jsonl").write_text("x")
  (tmp_path / "link.jsonl").symlink_to(tmp_path / "in.jsonl")
  monkeypatch.chdir(tmp_path)
  assert outputs.same_file("in.jsonl", tmp_path / "in.jsonl")
  assert outputs.same_file("./link.jsonl", "in.jsonl")
  assert not outputs.same_file("in.jsonl", "out.jsonl")
  assert outputs.same_file("new.jsonl", tmp_path / "new.jsonl")  # Neither exists yet.
