"""Test data saved the way other tools save it: a byte-order mark, CRLF or CR line ends."""
import gzip
import pathlib
import shutil

BYTE_ORDER_MARK = "\ufeff"


def resaved_copy(source: pathlib.Path, destination: pathlib.Path, line_end: str) -> pathlib.Path:
  """A copy of the directory `source` whose files (gzipped ones inside their gzip) start with a byte-order mark
  and end their lines with `line_end`."""
  shutil.copytree(source, destination)
  for path in sorted(p for p in destination.rglob("*") if p.is_file()):
    zipped = path.suffix == ".gz"
    data = gzip.decompress(path.read_bytes()) if zipped else path.read_bytes()
    text = BYTE_ORDER_MARK + data.decode("utf-8").removeprefix(BYTE_ORDER_MARK).replace("\n", line_end)
    path.write_bytes(gzip.compress(text.encode("utf-8")) if zipped else text.encode("utf-8"))
  return destination
