"""Tests of the offer readers (DeepMatcher, WDC pair files, WDC LSPC json) and of offer serialization."""
import gzip
import json
import pathlib

from etils import epath
import pytest

from docent_jax.data import io
from docent_jax.data.offers import files as offer_files
import io_fixtures

SPLITS = offer_files.PAIR_SPLITS
BOM = "\ufeff"

# A tiny DeepMatcher directory: Abt-style tableA (BOM, empty prices, a description spanning two
# lines), Buy-style tableB, and pairs whose ids appear in no particular order.
TABLE_A = (BOM + 'id,name,price,description\n'
           '0,sony  tv 55,,"big screen\nwith hdmi"\n'
           '1,bose speaker,399.0,small\n'
           '2,canon camera,,\n')
TABLE_B = (BOM + 'id,name,price,description\n'
           '10,Sony TV 55in,899,hdmi tv\n'
           '11,Bose Speaker Black,,\n')
PAIRS = {
    "train.csv": "ltable_id,rtable_id,label\n0,10,1\n1,10,0\n1,11,1\n",
    "valid.csv": BOM + "ltable_id,rtable_id,label\n2,11,0\n",
    "test.csv": BOM + "ltable_id,rtable_id,label\n2,10,0\n0,11,0\n",
}


def write_deepmatcher(directory: pathlib.Path, table_a: str = TABLE_A) -> pathlib.Path:
  """The tiny DeepMatcher directory above (tableA replaceable)."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / "tableA.csv").write_text(table_a, encoding="utf-8")
  (directory / "tableB.csv").write_text(TABLE_B, encoding="utf-8")
  for name, text in PAIRS.items():
    (directory / name).write_text(text, encoding="utf-8")
  return directory


def test_serialize_keeps_empty_values_and_collapses_whitespace():
  attributes = [("title", " Sony  TV\n55\" "), ("price", ""), ("description", "a b c d")]
  assert offer_files.serialize(attributes) == (
      '[COL] title [VAL] Sony TV 55" [COL] price [VAL] [COL] description [VAL] a b c d')
  assert offer_files.serialize(attributes, {"description": 2, "title": 1}) == (
      "[COL] title [VAL] Sony [COL] price [VAL] [COL] description [VAL] a b")
  assert offer_files.serialize([("price", "")]) == "[COL] price [VAL]"


def test_clean_wdc_value_removes_schema_org_quoting():
  raw = ' "Corsair Vengeance LPX  64GB "@en 4x16GB | CMK64GX4M4A2666C16 Novatech"@en '
  assert offer_files.clean_wdc_value(raw) == "Corsair Vengeance LPX 64GB 4x16GB | CMK64GX4M4A2666C16 Novatech"
  assert offer_files.clean_wdc_value("no quotes at all") == ""


def test_deepmatcher_offers_pairs_and_bom(tmp_path):
  dataset = offer_files.read_deepmatcher(offer_files.deepmatcher_paths(write_deepmatcher(tmp_path)))
  assert dataset.source_names == ("tableA", "tableB")
  assert dataset.offer_source == [0, 0, 0, 1, 1]
  assert dataset.offer_ids == ["0", "1", "2", "10", "11"]
  assert dataset.offer_texts[0] == (
      "[COL] name [VAL] sony tv 55 [COL] price [VAL] [COL] description [VAL] big screen with hdmi")
  assert dataset.offer_texts[2] == "[COL] name [VAL] canon camera [COL] price [VAL] [COL] description [VAL]"
  assert dataset.offer_texts[3] == "[COL] name [VAL] Sony TV 55in [COL] price [VAL] 899 [COL] description [VAL] hdmi tv"
  assert dataset.offer_products == [""] * 5
  assert dataset.pairs == {"train": [(0, 3, 1), (1, 3, 0), (1, 4, 1)], "validation": [(2, 4, 0)],
                           "test": [(2, 3, 0), (0, 4, 0)]}
  assert dataset.counts == {"tableA rows": 3, "tableB rows": 2, "train pairs": 3, "train positives": 2,
                            "validation pairs": 1, "validation positives": 0, "test pairs": 2, "test positives": 0}
  # Without byte-order marks the files read the same.
  plain = tmp_path / "plain"
  write_deepmatcher(plain, TABLE_A.removeprefix(BOM))
  assert offer_files.read_deepmatcher(offer_files.deepmatcher_paths(plain)) == dataset


def test_deepmatcher_attribute_selection_and_word_caps(tmp_path):
  paths = offer_files.deepmatcher_paths(write_deepmatcher(tmp_path))
  dataset = offer_files.read_deepmatcher(paths, ("description", "name"), {"description": 1})
  assert dataset.offer_texts[0] == "[COL] description [VAL] big [COL] name [VAL] sony tv 55"
  with pytest.raises(io.DataFormatError, match=r"tableA.csv:1: .*lacks attribute columns \['brand'\]"):
    offer_files.read_deepmatcher(paths, ("brand",))


@pytest.mark.parametrize("name, content, message", [
    ("tableA.csv", TABLE_A.replace("1,bose speaker,399.0,small", "1,bose speaker,399.0"),
     r"tableA.csv:4: expected 4 fields"),
    ("tableB.csv", TABLE_B.replace("11,Bose", "10,Bose"), r"tableB.csv:3: duplicate id '10' \(first on line 2\)"),
    ("tableA.csv", TABLE_A.replace("id,name", "key,name"), r"tableA.csv:1: the first column must be 'id'"),
    ("train.csv", PAIRS["train.csv"].replace("1,10,0", "7,10,0"), r"train.csv:3: ltable_id '7' is not an id of tableA"),
    ("test.csv", PAIRS["test.csv"].replace("0,11,0", "0,12,0"), r"test.csv:3: rtable_id '12' is not an id of tableB"),
    ("valid.csv", PAIRS["valid.csv"].replace("2,11,0", "2,11,2"), r"valid.csv:2: label '2' is not 0 or 1"),
    ("train.csv", PAIRS["train.csv"].replace(",1\n", ",0\n"), r"train.csv:1-4: none of the 3 training pairs"),
    ("valid.csv", "ltable_id,rtable_id,label\n", r"valid.csv:1: no validation pairs"),
    ("valid.csv", "ltable_id,label\n2,0\n", r"valid.csv:1: header .* lacks columns \['rtable_id'\]"),
    ("test.csv", PAIRS["test.csv"] + "2,10,1\n", r"test.csv:4: pair labelled 1, but 0 at test.csv:2"),
])
def test_deepmatcher_bad_input_names_file_and_line(tmp_path, name, content, message):
  write_deepmatcher(tmp_path)
  (tmp_path / name).write_text(content, encoding="utf-8")
  with pytest.raises(io.DataFormatError, match=message):
    offer_files.read_deepmatcher(offer_files.deepmatcher_paths(tmp_path))


def test_deepmatcher_repeated_pairs_count_once(tmp_path, caplog):
  write_deepmatcher(tmp_path)
  (tmp_path / "test.csv").write_text(PAIRS["test.csv"] + "2,10,0\n0,11,0\n", encoding="utf-8")
  with caplog.at_level("WARNING"):
    dataset = offer_files.read_deepmatcher(offer_files.deepmatcher_paths(tmp_path))
  assert dataset.pairs["test"] == [(2, 3, 0), (0, 4, 0)]
  assert dataset.counts["repeated test pairs dropped"] == 2
  assert "dropped 2 repeated test pairs" in caplog.text


def test_deepmatcher_non_utf8_bytes_name_file_and_line(tmp_path):
  write_deepmatcher(tmp_path)
  (tmp_path / "test.csv").write_bytes(b"ltable_id,rtable_id,label\n2,10,0\n0,11,\xff\n")
  with pytest.raises(io.DataFormatError, match=r"test.csv:3: bytes that are not valid UTF-8"):
    offer_files.read_deepmatcher(offer_files.deepmatcher_paths(tmp_path))


def test_deepmatcher_missing_files_are_named(tmp_path):
  write_deepmatcher(tmp_path)
  (tmp_path / "valid.csv").unlink()
  with pytest.raises(FileNotFoundError, match=r"no \['valid.csv'\]"):
    offer_files.deepmatcher_paths(tmp_path)


# ---------------------------------------------------------------------------------------------------
# WDC pair files.

PAIR_LINES = {
    "train": ["COL title VAL  sony tv\tCOL title VAL sony  tv 55\t1",
              "COL title VAL bose speaker\tCOL title VAL sony tv\t0"],
    "validation": ["COL title VAL sony tv 55 \tCOL title VAL canon camera\t0"],
    "test": ["COL title VAL canon camera\tCOL title VAL bose speaker\t0"],
}


def _write_pair_files(directory: pathlib.Path, lines=None) -> dict[str, pathlib.Path]:
  paths = {}
  for split, name in zip(SPLITS, ("train.txt.small", "valid.txt.small", "test.txt")):
    paths[split] = directory / name
    paths[split].write_text("\n".join((lines or PAIR_LINES)[split]) + "\n", encoding="utf-8")
  return paths


def test_wdc_pair_files_merge_identical_offers(tmp_path):
  dataset = offer_files.read_wdc_pair_files(_write_pair_files(tmp_path))
  assert dataset.offer_texts == ["[COL] title [VAL] sony tv", "[COL] title [VAL] sony tv 55",
                                 "[COL] title [VAL] bose speaker", "[COL] title [VAL] canon camera"]
  assert dataset.offer_ids == ["train.txt.small:1:left", "train.txt.small:1:right", "train.txt.small:2:left",
                               "valid.txt.small:1:right"]
  assert dataset.source_names == ("offers",) and dataset.offer_source == [0] * 4
  assert dataset.offer_products == [""] * 4
  assert dataset.pairs == {"train": [(0, 1, 1), (2, 0, 0)], "validation": [(1, 3, 0)], "test": [(3, 2, 0)]}
  assert dataset.counts["offer occurrences"] == 8 and dataset.counts["distinct offers"] == 4


def test_wdc_pair_files_with_several_attributes(tmp_path):
  lines = {
      "train": ["COL title VAL sony tv COL brand VAL Sony\tCOL title VAL sony tv COL brand VAL\t1"],
      "validation": ["COL title VAL a COL brand VAL x\tCOL title VAL b COL brand VAL y\t0"],
      "test": ["COL brand VAL Sony COL title VAL sony tv\tCOL title VAL b COL brand VAL y\t1"],
  }
  paths = _write_pair_files(tmp_path, lines)
  dataset = offer_files.read_wdc_pair_files(paths)
  assert dataset.offer_texts[:2] == ["[COL] title [VAL] sony tv [COL] brand [VAL] Sony",
                                     "[COL] title [VAL] sony tv [COL] brand [VAL]"]
  assert len(dataset.offer_texts) == 5  # The test's reordered offer differs as written ...
  selected = offer_files.read_wdc_pair_files(paths, attributes=("title", "brand"))
  assert len(selected.offer_texts) == 4  # ... and is the same offer once the order is fixed.
  assert selected.pairs["test"][0][0] == 0
  assert offer_files.parse_pair_file_offer("COL title VAL COLd VALue COL x VAL") == (("title", "COLd VALue"), ("x", ""))


@pytest.mark.parametrize("split, line, message", [
    ("train", "COL title VAL a\tCOL title VAL b", r"train.txt.small:3: expected 3 tab-separated fields"),
    ("validation", "title a\tCOL title VAL b\t0", r"valid.txt.small:2: left offer: expected 'COL <name> VAL"),
    ("test", "COL title VAL a\tCOL title VAL b\tyes", r"test.txt:2: label 'yes' is not 0 or 1"),
    ("test", "COL title VAL a\tCOL name VAL b\t0", r"test.txt:2: right offer lacks attributes \['title'\]"),
])
def test_wdc_pair_files_bad_input_names_file_and_line(tmp_path, split, line, message):
  lines = {s: list(v) for s, v in PAIR_LINES.items()}
  lines[split].append(line)
  with pytest.raises(io.DataFormatError, match=message):
    offer_files.read_wdc_pair_files(_write_pair_files(tmp_path, lines), attributes=("title",))


def test_wdc_pair_files_without_positives_or_utf8(tmp_path):
  lines = {**PAIR_LINES, "train": [line[:-1] + "0" for line in PAIR_LINES["train"]]}
  with pytest.raises(io.DataFormatError, match=r"train.txt.small:1-2: none of the 2 training pairs"):
    offer_files.read_wdc_pair_files(_write_pair_files(tmp_path, lines))
  paths = _write_pair_files(tmp_path)
  paths["test"].write_bytes(b"COL title VAL a\tCOL title VAL b\t0\nCOL title VAL \xe9\tCOL title VAL b\t0\n")
  with pytest.raises(io.DataFormatError, match=r"test.txt:2: bytes that are not valid UTF-8"):
    offer_files.read_wdc_pair_files(paths)


# ---------------------------------------------------------------------------------------------------
# WDC LSPC json.


def _offer(side: str, identifier: int, cluster: int, title: str, **others) -> dict:
  fields = {"id": identifier, "cluster_id": cluster, "title": title, "brand": None, "description": None,
            "specTableContent": None, **others}
  return {f"{name}_{side}": value for name, value in fields.items()}


def _pair(left: dict, right: dict, label, pair_id: str) -> dict:
  return {**left, **right, "label": label, "pair_id": pair_id}


SONY = dict(identifier=1, cluster=100, title='"Sony TV 55"@en shop"@en', brand='"Sony"@en',
            description='"A " big " tv"@en', specTableContent="size  55 inch")
SONY_2 = dict(identifier=2, cluster=100, title='"Sony TV 55in"@en-US')
BOSE = dict(identifier=3, cluster=200, title='"Bose speaker"@en')


def write_wdc_json(directory: pathlib.Path, train=None, validation_ids=("1#3",), test=None) -> dict[str, pathlib.Path]:
  """Tiny WDC LSPC files: computers_train_small.json.gz, computers_valid_small.csv, computers_gs.json.gz."""
  train = train or [_pair(_offer("left", **SONY), _offer("right", **SONY_2), 1, "1#2"),
                    _pair(_offer("left", **SONY), _offer("right", **BOSE), 0, "1#3"),
                    _pair(_offer("left", **BOSE), _offer("right", **SONY_2), 0, "3#2")]
  test = test or [_pair(_offer("left", **SONY_2), _offer("right", **BOSE), 0, "2#3")]
  paths = {"train": directory / "computers_train_small.json.gz", "validation": directory / "computers_valid_small.csv",
           "test": directory / "computers_gs.json.gz"}
  for split, records in (("train", train), ("test", test)):
    paths[split].write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
  paths["validation"].write_text("pair_id,label\n" + "".join(f"{p},0\n" for p in validation_ids))
  return paths


def test_wdc_json_offers_have_ids_and_products(tmp_path):
  paths = write_wdc_json(tmp_path)
  dataset = offer_files.read_wdc_json(paths["train"], paths["validation"], paths["test"])
  assert dataset.offer_ids == ["1", "2", "3"]
  assert dataset.offer_products == ["100", "100", "200"]
  assert dataset.offer_texts == ["[COL] title [VAL] Sony TV 55 shop", "[COL] title [VAL] Sony TV 55in",
                                 "[COL] title [VAL] Bose speaker"]
  assert dataset.pairs == {"train": [(0, 1, 1), (2, 1, 0)], "validation": [(0, 2, 0)], "test": [(1, 2, 0)]}
  everything = offer_files.read_wdc_json(paths["train"], paths["validation"], paths["test"],
                                         offer_files.WDC_ATTRIBUTES, {"brand": 5, "title": 2})
  assert everything.offer_texts[0] == ("[COL] brand [VAL] Sony [COL] title [VAL] Sony TV [COL] description [VAL] "
                                       "A big tv [COL] specTableContent [VAL] size 55 inch")
  assert everything.offer_texts[2] == ("[COL] brand [VAL] [COL] title [VAL] Bose speaker [COL] description [VAL] "
                                       "[COL] specTableContent [VAL]")


@pytest.mark.parametrize("change, message", [
    (dict(train_line='{"id_left": 1'), r"computers_train_small.json.gz:4: not a JSON object"),
    (dict(train_record=_pair(_offer("left", **{**SONY, "title": '"Sony"'}), _offer("right", **BOSE), 0, "9")),
     r"computers_train_small.json.gz:4: offer 1 differs from its copy at computers_train_small.json.gz:1"),
    (dict(train_record=_pair(_offer("left", **SONY), _offer("right", **BOSE), "match", "9")),
     r"computers_train_small.json.gz:4: label 'match' is not 0 or 1"),
    (dict(train_record=_pair(_offer("left", **SONY), _offer("right", **{**BOSE, "cluster": None}), 0, "9")),
     r"computers_train_small.json.gz:4: no \['cluster_id_right'\]"),
    (dict(train_record={k: v for k, v in _pair(_offer("left", **SONY), _offer("right", **BOSE), 0, "9").items()
                        if k != "title_right"}),
     r"computers_train_small.json.gz:4: no title_right \(null when the offer has no title\)"),
    (dict(validation_ids=("1#3", "5#6")), r"computers_valid_small.csv:3: pair_id '5#6' is not a pair of"),
])
def test_wdc_json_bad_input_names_file_and_line(tmp_path, change, message):
  paths = write_wdc_json(tmp_path, validation_ids=change.get("validation_ids", ("1#3",)))
  if "train_record" in change or "train_line" in change:
    line = change.get("train_line") or json.dumps(change["train_record"])
    paths["train"].write_bytes(gzip.compress(gzip.decompress(paths["train"].read_bytes()) + line.encode() + b"\n"))
  with pytest.raises(io.DataFormatError, match=message):
    offer_files.read_wdc_json(paths["train"], paths["validation"], paths["test"])


def test_wdc_json_rejects_unknown_attributes(tmp_path):
  paths = write_wdc_json(tmp_path)
  with pytest.raises(ValueError, match="subset of"):
    offer_files.read_wdc_json(paths["train"], paths["validation"], paths["test"], ("price",))


# ---------------------------------------------------------------------------------------------------
# Every format.


def _read_every_format(directory: pathlib.Path) -> tuple[offer_files.OfferDataset, ...]:
  wdc_json = {"train": "computers_train_small.json.gz", "validation": "computers_valid_small.csv",
              "test": "computers_gs.json.gz"}
  pair_files = {"train": "train.txt.small", "validation": "valid.txt.small", "test": "test.txt"}
  return (offer_files.read_deepmatcher(offer_files.deepmatcher_paths(directory / "deepmatcher")),
          offer_files.read_wdc_pair_files({split: directory / "pairs" / name for split, name in pair_files.items()}),
          offer_files.read_wdc_json(*(directory / "json" / wdc_json[split] for split in SPLITS)))


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
def test_byte_order_marks_and_line_ends_do_not_change_the_offers(tmp_path, line_end):
  plain = tmp_path / "plain"
  write_deepmatcher(plain / "deepmatcher")
  (plain / "pairs").mkdir()
  _write_pair_files(plain / "pairs")
  (plain / "json").mkdir()
  write_wdc_json(plain / "json")
  resaved = io_fixtures.resaved_copy(plain, tmp_path / "resaved", line_end)
  assert _read_every_format(resaved) == _read_every_format(plain)


def test_reads_gs_files(gcs_bucket):
  bucket, opened = gcs_bucket
  write_deepmatcher(bucket / "deepmatcher")
  (bucket / "pairs").mkdir()
  _write_pair_files(bucket / "pairs")
  (bucket / "json").mkdir()
  write_wdc_json(bucket / "json")
  assert _read_every_format(epath.Path("gs://bucket")) == _read_every_format(bucket)
  assert {"gs://bucket/deepmatcher/tableA.csv", "gs://bucket/pairs/test.txt",
          "gs://bucket/json/computers_gs.json.gz"} <= set(opened)


# ---------------------------------------------------------------------------------------------------
# Real data.


def test_abt_buy_counts(shared_data_dir):
  directory = shared_data_dir / "abt_buy"
  dataset = offer_files.read_deepmatcher(offer_files.deepmatcher_paths(directory))
  assert dataset.counts == {"tableA rows": 1_081, "tableB rows": 1_092,
                            "train pairs": 5_743, "train positives": 616,
                            "validation pairs": 1_916, "validation positives": 206,
                            "test pairs": 1_916, "test positives": 206}
  assert dataset.offer_source.count(0) == 1_081 and len(dataset.offer_texts) == 2_173
  # Pairs point at the offers their ids name.
  first = (directory / "train.csv").read_text(encoding="utf-8-sig").splitlines()[1].split(",")
  left, right, label = dataset.pairs["train"][0]
  assert (dataset.offer_ids[left], dataset.offer_ids[right], label) == (first[0], first[1], int(first[2]))
  assert dataset.offer_source[left] == 0 and dataset.offer_source[right] == 1


def test_wdc_computers_small_counts(shared_data_dir):
  directory = shared_data_dir / "wdc_computers"
  names = {"train": "train.txt.small", "validation": "valid.txt.small", "test": "test.txt"}
  dataset = offer_files.read_wdc_pair_files({split: directory / name for split, name in names.items()})
  assert [(dataset.counts[f"{s} pairs"], dataset.counts[f"{s} positives"]) for s in SPLITS] == [
      (2_231, 557), (536, 149), (1_098, 299)]
  # Distinct offers, counted straight from the files: a title with its whitespace collapsed.
  titles = []
  for split, name in names.items():
    for line in (directory / name).read_text(encoding="utf-8").splitlines():
      titles += [" ".join(field.removeprefix("COL title VAL").split()) for field in line.split("\t")[:2]]
  assert len(dataset.offer_texts) == len(set(titles)) == dataset.counts["distinct offers"]
  assert dataset.counts["offer occurrences"] == len(titles)
  left, right, _ = dataset.pairs["test"][-1]
  assert [dataset.offer_texts[left], dataset.offer_texts[right]] == [f"[COL] title [VAL] {t}" for t in titles[-2:]]
