"""Tests of source-aware sampling and the contrastive offer pipeline (labels, resume, slicing)."""
import csv

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from docent_jax.data import tokenization
from docent_jax.data.offers import labels as offer_labels
from docent_jax.data.offers import sampling as offer_sampling
from docent_jax.modules import pretrained

MAX_LEN = 24


def _tiny_offers():
  """Three sources: products shared by sources 0 and 1, by 1 and 2, one only in 0, and singletons."""
  rng = np.random.default_rng(0)
  labels, source = [], []
  for product in range(6):  # In sources 0 and 1.
    labels += [product] * 3
    source += [0, 1, int(rng.integers(2))]
  for product in (6, 7):  # In sources 1 and 2.
    labels += [product] * 2
    source += [1, 2]
  labels += [8] * 3  # Three offers of source 0.
  source += [0] * 3
  for origin, count in ((0, 10), (1, 10), (2, 8)):  # Singletons.
    labels += list(range(len(set(labels)), len(set(labels)) + count))
    source += [origin] * count
  order = rng.permutation(len(labels))  # Offers of one product are not neighbours.
  labels, source = np.array(labels, np.int32)[order], np.array(source, np.int32)[order]
  texts = [f"[COL] title [VAL] product {label} offer {i} [COL] shop [VAL] shop {s}"
           for i, (label, s) in enumerate(zip(labels, source))]
  return texts, labels, source


@pytest.fixture(scope="module")
def offers():
  return _tiny_offers()


@pytest.fixture(scope="module")
def tokenizer():
  return pretrained.load_tokenizer("minilm-l6")


def _batch_sources(offers, labels, source):
  """The sources s such that every offer of the batch is of s or has a label of an offer of s."""
  return [s for s in np.unique(source)
          if np.all((source[offers] == s) | np.isin(labels[offers], labels[source == s]))]


def test_sampled_datasets_hold_a_source_and_its_labels_partners(offers):
  _, labels, source = offers
  datasets = offer_sampling.sampled_datasets(labels, source)
  assert len(datasets) == 3
  for s, dataset in enumerate(datasets):
    expected = [i for i in range(len(labels))
                if source[i] == s or any(labels[j] == labels[i] and source[j] == s for j in range(len(labels)))]
    np.testing.assert_array_equal(dataset, expected)
  mixed = offer_sampling.sampled_datasets(labels, source, source_aware=False)
  np.testing.assert_array_equal(mixed[0], np.arange(len(labels)))


def _round(sampler, round_):
  first = round_ * sampler.batches_per_round
  return [sampler(index) for index in range(first, first + sampler.batches_per_round)]


def test_batches_stay_within_a_source_and_partners_share_the_label(offers):
  _, labels, source = offers
  sampler = offer_sampling.ContrastiveSampler(labels, source, batch_size=4, seed=1)
  datasets = offer_sampling.sampled_datasets(labels, source)
  assert sampler.batches_per_round == sum(len(d) // 4 for d in datasets)
  chosen = []
  for round_ in range(3):
    anchors_of_dataset = {d: [] for d in range(len(datasets))}
    for index, batch in enumerate(_round(sampler, round_), round_ * sampler.batches_per_round):
      assert batch.shape == (8,)
      anchors, partners = batch[0::2], batch[1::2]
      assert _batch_sources(batch, labels, source), f"batch {index} mixes sources: {source[batch]}"
      dataset, _ = sampler.anchors(index)
      assert set(batch.tolist()) <= set(datasets[dataset].tolist())
      chosen.append(dataset)
      anchors_of_dataset[dataset] += anchors.tolist()
      np.testing.assert_array_equal(labels[partners], labels[anchors])
      for anchor, partner in zip(anchors, partners):
        others = np.sum(labels[datasets[dataset]] == labels[anchor]) - 1
        assert (partner != anchor) == (others > 0)
    # One round: every dataset's whole batches, each anchor once.
    for dataset, anchors in anchors_of_dataset.items():
      assert len(anchors) == len(set(anchors)) == len(datasets[dataset]) // 4 * 4
  # The dataset of a batch is random: the order of datasets differs between rounds.
  per_round = np.array(chosen).reshape(3, -1)
  assert not np.array_equal(per_round[0], per_round[1])


def test_partners_are_drawn_among_all_other_offers_of_the_label(offers):
  _, labels, source = offers
  sampler = offer_sampling.ContrastiveSampler(labels, source, batch_size=4, seed=2)
  label_8 = set(np.flatnonzero(labels == 8).tolist())  # Three offers, all of source 0.
  partners = {}
  for index in range(40 * sampler.batches_per_round):
    batch = sampler(index)
    for anchor, partner in zip(batch[0::2], batch[1::2]):
      partners.setdefault(int(anchor), set()).add(int(partner))
  for anchor in label_8:
    assert partners[anchor] == label_8 - {anchor}


def test_mixed_sampling_mixes_sources(offers):
  _, labels, source = offers
  sampler = offer_sampling.ContrastiveSampler(labels, source, batch_size=8, seed=0, source_aware=False)
  batches = _round(sampler, 0)
  assert sampler.batches_per_round == len(labels) // 8
  assert any(not _batch_sources(batch, labels, source) for batch in batches)
  for batch in batches:
    np.testing.assert_array_equal(labels[batch[1::2]], labels[batch[0::2]])


def test_a_dataset_smaller_than_a_batch_is_rejected(offers):
  _, labels, source = offers
  with pytest.raises(ValueError, match="Sampled dataset 2 has 12 offers, fewer than one batch of 13"):
    offer_sampling.ContrastiveSampler(labels, source, batch_size=13, seed=0)


def _loader(offers, tokenizer, **kwargs):
  texts, labels, source = offers
  return offer_sampling.contrastive_batches(texts, labels, source, tokenizer, batch_size=4, max_len=MAX_LEN, seed=7,
                                            **kwargs)


def test_pipeline_yields_the_sampled_offers_tokens_and_labels(offers, tokenizer):
  texts, labels, source = offers
  sampler = offer_sampling.ContrastiveSampler(labels, source, batch_size=4, seed=7)
  batches = list(_loader(offers, tokenizer, num_epochs=2))
  assert len(batches) == 2 * sampler.batches_per_round
  for index, batch in enumerate(batches):
    assert {key: (value.shape, value.dtype) for key, value in batch.items()} == {
        "tokens": ((8, MAX_LEN), np.int32), "label": ((8,), np.int32)}
    expected = sampler(index)
    np.testing.assert_array_equal(batch["label"], labels[expected])
    np.testing.assert_array_equal(batch["tokens"], tokenization.tokenize_texts(tokenizer, [texts[i] for i in expected],
                                                                               MAX_LEN))


def test_augmentation_changes_the_views_reproducibly(offers, tokenizer):
  plain = next(iter(_loader(offers, tokenizer)))
  augmented = next(iter(_loader(offers, tokenizer, augmentation="all", augmentation_probability=0.5)))
  again = next(iter(_loader(offers, tokenizer, augmentation="all", augmentation_probability=0.5)))
  np.testing.assert_array_equal(augmented["label"], plain["label"])
  assert not np.array_equal(augmented["tokens"], plain["tokens"])
  np.testing.assert_array_equal(again["tokens"], augmented["tokens"])
  with pytest.raises(ValueError, match="Unknown augmentation"):
    _loader(offers, tokenizer, augmentation="rotate")


def _take(iterator, count):
  return [next(iterator) for _ in range(count)]


def _assert_same_batches(first, second):
  assert len(first) == len(second)
  for a, b in zip(first, second):
    assert a.keys() == b.keys()
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


def test_resume_from_saved_state_gives_the_same_batches(offers, tokenizer, tmp_path):
  def make_iterator():
    return iter(_loader(offers, tokenizer, augmentation="typo"))

  iterator = make_iterator()
  _take(iterator, 13)  # Past the end of the first round.
  restored = make_iterator()
  restored.set_state(iterator.get_state())
  expected = _take(iterator, 3)
  _assert_same_batches(_take(restored, 3), expected)
  # Through Orbax, as the trainer saves it.
  params = {"kernel": jnp.ones((2,))}
  with ocp.CheckpointManager(tmp_path / "checkpoints", item_names=("params", "data")) as manager:
    manager.save(16, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                             data=grain.checkpoint.CheckpointSave(iterator)))
    manager.wait_until_finished()
    expected = _take(iterator, 2)
    from_checkpoint = make_iterator()
    manager.restore(16, args=ocp.args.Composite(params=ocp.args.StandardRestore(params),
                                                data=grain.checkpoint.CheckpointRestore(from_checkpoint)))
  _assert_same_batches(_take(from_checkpoint, 2), expected)


def test_each_process_reads_its_slice_of_the_global_batch(offers, tokenizer, monkeypatch):
  whole = _take(iter(_loader(offers, tokenizer, augmentation="all", augmentation_probability=0.5)), 3)
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  slices = []
  for process in range(2):
    monkeypatch.setattr(jax, "process_index", lambda process=process: process)
    slices.append(_take(iter(_loader(offers, tokenizer, augmentation="all", augmentation_probability=0.5)), 3))
  for index, batch in enumerate(whole):
    for key in batch:
      np.testing.assert_array_equal(np.concatenate([slices[0][index][key], slices[1][index][key]]), batch[key])
  with pytest.raises(ValueError, match="not divisible by 2 processes"):
    texts, labels, source = offers
    offer_sampling.contrastive_batches(texts, labels, source, tokenizer, batch_size=3, max_len=MAX_LEN, seed=0)


def _read_abt_buy(directory):
  """Abt (source 0) then Buy (source 1) offer names, and the train + valid pairs over them."""
  tables = []
  for name in ("tableA.csv", "tableB.csv"):
    with open(directory / name, encoding="utf-8-sig", newline="") as file:
      tables.append([row["name"] for row in csv.DictReader(file)])
  pairs = []
  for name in ("train.csv", "valid.csv"):
    with open(directory / name, encoding="utf-8-sig", newline="") as file:
      pairs += [(int(row["ltable_id"]), len(tables[0]) + int(row["rtable_id"]), int(row["label"]))
                for row in csv.DictReader(file)]
  source = np.repeat(np.arange(2, dtype=np.int32), [len(tables[0]), len(tables[1])])
  return tables[0] + tables[1], source, np.array(pairs, np.int64)


def test_abt_buy_correspondence_labels_and_source_aware_batches(shared_data_dir):
  texts, source, pairs = _read_abt_buy(shared_data_dir / "abt_buy")
  labels, num_edges = offer_labels.correspondence_labels(len(texts), pairs, fraction=0.8, seed=0)
  matches = len({tuple(sorted(p[:2])) for p in pairs.tolist() if p[2] == 1})
  assert num_edges == round(0.8 * matches) and matches > 500
  # Matches join an Abt and a Buy offer, so every multi-offer label spans both sources.
  shared = np.unique(labels[source == 0])[np.isin(np.unique(labels[source == 0]), labels[source == 1])]
  sizes = np.bincount(labels)
  assert set(np.flatnonzero(sizes > 1).tolist()) == set(shared.tolist())
  for source_aware in (True, False):
    sampler = offer_sampling.ContrastiveSampler(labels, source, batch_size=64, seed=0, source_aware=source_aware)
    batches = _round(sampler, 0)
    mixing = [not _batch_sources(batch, labels, source) for batch in batches]
    assert any(mixing) != source_aware
    assert all(np.array_equal(labels[b[0::2]], labels[b[1::2]]) for b in batches)
    # Anchors of a matched product get another offer as partner, the others themselves.
    partnered = np.mean([np.mean(b[0::2] != b[1::2]) for b in batches])
    datasets = offer_sampling.sampled_datasets(labels, source, source_aware=source_aware)
    matched = np.mean(sizes[labels[np.concatenate(datasets)]] > 1)
    assert partnered == pytest.approx(matched, abs=0.02)
