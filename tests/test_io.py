"""Tests of the shared text reader: byte-order marks, line ends, gzip, empty files, errors, gs:// paths."""
import gzip

from etils import epath
import pytest

from docent_jax.data import io


@pytest.mark.parametrize("data", [
    b"a\tb\nc\n", b"a\tb\nc", b"\xef\xbb\xbfa\tb\nc\n", b"a\tb\r\nc\r\n", b"\xef\xbb\xbfa\tb\r\nc", b"a\tb\rc\r",
    b"a\tb\rc", b"a\tb\r\nc\n",
])
def test_byte_order_mark_and_line_ends(tmp_path, data):
  path = tmp_path / "rows.tsv"
  path.write_bytes(data)
  assert list(io.numbered_lines(path)) == [(1, "a\tb"), (2, "c")]


def test_gzip_with_byte_order_mark(tmp_path):
  path = tmp_path / "rows.txt.gz"
  path.write_bytes(gzip.compress(b"\xef\xbb\xbfx\r\ny\r\n"))
  assert io.read_lines(path) == ["x", "y"]


def test_blank_lines_are_kept_with_their_numbers(tmp_path):
  path = tmp_path / "rows.txt"
  path.write_bytes(b"\n \nx\r\r\ny\n\n")
  assert list(io.numbered_lines(path)) == [(1, ""), (2, " "), (3, "x"), (4, ""), (5, "y"), (6, "")]
  # Only CR, LF and CRLF end a line; other Unicode line separators are text.
  path.write_text("a\u2028b\x85c\x0cd\n", encoding="utf-8")
  assert io.read_lines(path) == ["a\u2028b\x85c\x0cd"]


@pytest.mark.parametrize("data", [b"", b"\n\n", b" \t\r\n\r", b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n"])
def test_empty_file(tmp_path, data):
  path = tmp_path / "rows.txt"
  path.write_bytes(data)
  with pytest.raises(io.DataFormatError, match=r"rows.txt: file is empty"):
    io.read_lines(path)


@pytest.mark.parametrize("data, line", [
    (b"a\nb\xff\n", 2), (b"a\rb\rc\xff", 3), (b"a\r\nb\r\n\xc3\x28", 3), (b"\xef\xbb\xbfok\n\xe9", 2),
    (b"\n\n\xff", 3),
])
def test_bytes_that_are_not_utf8_name_the_line(tmp_path, data, line):
  path = tmp_path / "rows.txt"
  path.write_bytes(data)
  with pytest.raises(io.DataFormatError, match=rf"rows.txt:{line}: bytes that are not valid UTF-8"):
    io.read_lines(path)


@pytest.mark.parametrize("data, line", [(b"a\x00b\nc\n", 1), (b"a\nb\rc\x00\n", 3), (b"a\n" + b"\x00" * 512, 2)])
def test_nul_bytes_name_the_line(tmp_path, data, line):
  path = tmp_path / "rows.tsv"
  path.write_bytes(data)
  with pytest.raises(io.DataFormatError, match=rf"rows.tsv:{line}: a NUL byte"):
    list(io.numbered_lines(path))


def test_cut_short_gzip_names_the_line_where_it_ends(tmp_path):
  path = tmp_path / "rows.tsv.gz"
  path.write_bytes(gzip.compress(b"".join(b"row %d\n" % i for i in range(1000)))[:-20])
  with pytest.raises(io.DataFormatError, match=r"rows.tsv.gz:\d+: damaged or cut-short compressed data"):
    list(io.numbered_lines(path))
  path.write_bytes(b"\x1f\x8b not gzip")
  with pytest.raises(io.DataFormatError, match=r"rows.tsv.gz:1: damaged or cut-short compressed data"):
    list(io.numbered_lines(path))


def test_find_file(tmp_path):
  assert io.find_file(tmp_path, "rows.txt") is None
  (tmp_path / "rows.txt.gz").write_bytes(gzip.compress(b"x\n"))
  assert io.find_file(tmp_path, "rows.txt") == epath.Path(tmp_path / "rows.txt.gz")
  (tmp_path / "rows.txt").write_text("x\n")
  with pytest.raises(io.DataFormatError, match=r"both rows.txt and rows.txt.gz exist"):
    io.find_file(tmp_path, "rows.txt")


def test_gs_paths(gcs_bucket):
  bucket, opened = gcs_bucket
  (bucket / "rows.txt.gz").write_bytes(gzip.compress(b"\xef\xbb\xbfx\r\ny"))
  assert io.find_file("gs://bucket", "rows.txt") == epath.Path("gs://bucket/rows.txt.gz")
  assert list(io.numbered_lines("gs://bucket/rows.txt.gz")) == [(1, "x"), (2, "y")]
  assert opened == ["gs://bucket/rows.txt.gz"]
  with pytest.raises(io.DataFormatError, match=r"^gs://bucket/rows.txt.gz:1: bytes"):
    (bucket / "rows.txt.gz").write_bytes(gzip.compress(b"\xff"))
    io.read_lines("gs://bucket/rows.txt.gz")


def test_csv_rows_name_the_line_of_each_fault_and_a_quoted_row_ends_on_its_last(tmp_path):
  path = tmp_path / "t.csv"
  path.write_text('id,text\n1,"two\nlines"\n\n2,plain\n3\n')
  header, rows = io.csv_rows(path, ("id",))
  assert header == ["id", "text"]
  assert next(rows) == (3, ["1", "two\nlines"]) and next(rows) == (5, ["2", "plain"])  # The blank line holds no row.
  with pytest.raises(io.DataFormatError, match=r"t.csv:6: expected 2 fields, found 1 \(header: id,text\): '3'"):
    next(rows)
  with pytest.raises(io.DataFormatError, match=r"t.csv:1: header \['id', 'text'\] lacks columns \['label'\]"):
    io.csv_rows(path, ("id", "label"))
  (tmp_path / "empty.csv").write_text("")
  with pytest.raises(io.DataFormatError, match="empty.csv: file is empty"):
    io.csv_rows(tmp_path / "empty.csv")
