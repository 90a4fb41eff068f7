"""DOCENT tag prediction as a fine-tuning run (Zemlyanskiy et al., EACL 2021): a scorer of (movie, tag)
pairs trained against the frozen entity vectors of the DOCENT model the run starts from (`model_init`).

One run per task of `config.tags`: a label set ('tags': MovieLens tags, 'genres') and the fraction of
its vocabulary trained on. 1.0, closed vocabulary: fit on the training movies, every label scored on the
held-out (test) movies. Below 1, open vocabulary: the labels are held out instead of the movies
(`tag_labels.split_tag_vocabulary`, seeded by `config.seed`, so the splits of several fractions are
nested): fit on every movie's training labels, the held-out labels scored on every movie, and also those
held out at `tags.common_heldout_fraction` (if set: the held-out labels every point of a curve shares, so
that its points are scored on the same labels too). The items scored are
the model's movies (`tags.items = 'entities'`: their entity vectors) or, for the BoS-BERT baseline,
review sentences (`'sentences'`: up to `tags.sentences_per_movie` per movie, the pretrained
encoder's vectors pooled by `tags.sentence_pooling`; a movie's scores are the mean of its sentences'; no
`model_init`). The scorer is
  * 'dual' (DUAL, HYBRID): score(e, t) = g(e) . f(t), f the mean-pooled BERT fine-tuned from the
    model's sentence encoder, a vote-weighted softmax over sampled candidate tags;
  * 'pair_classifier' (FULL): a logistic head on [CLS] of `[CLS] e [SEP] tag [SEP]`, BERT fine-tuned
    from the model's, the entity rows fixed inputs (`modules.tag_scorers`).
Each step samples training movies and candidate tags (seeded by the step, so a resumed run draws the
same steps). The `tag_prediction` evaluator reports `test/<label set>_<metric>` (closed) or
`all/<label set>_open<fraction>_<metric>` (open).
"""
from typing import Any

import flax.linen as nn
import grain
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import tag_labels
from docent_jax.inference import movies
from docent_jax.modules import bert
from docent_jax.modules import docent_full
from docent_jax.modules import pretrained
from docent_jax.modules import tag_scorers
from docent_jax.objectives import base
from docent_jax.objectives import docent_dual

SCORERS = ("dual", "pair_classifier")
ITEMS = ("entities", "sentences")
LABEL_SETS = ("tags", "genres")


class TagFinetuningObjective(base.Objective):
  """Fits a tag scorer to the known training labels of the movies it fits on (the training movies, or every movie
  for an open vocabulary), their entity vectors frozen."""

  shapes_needed = ("num_entities",)

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    task = config.tags
    if task.scorer not in SCORERS:
      raise ValueError(f"Unknown tags.scorer {task.scorer!r}; valid: {list(SCORERS)}.")
    if task.label_set not in LABEL_SETS:
      raise ValueError(f"Unknown tags.label_set {task.label_set!r}; valid: {list(LABEL_SETS)}.")
    if task.get("items", "entities") not in ITEMS:
      raise ValueError(f"Unknown tags.items {task.items!r}; valid: {list(ITEMS)}.")
    if task.get("items", "entities") == "sentences" and task.scorer != "dual":
      raise ValueError("tags.items 'sentences' (BoS-BERT) needs tags.scorer 'dual'.")
    if not 0.0 < task.vocabulary_fraction <= 1.0:
      raise ValueError(f"tags.vocabulary_fraction must be in (0, 1]; got {task.vocabulary_fraction}.")
    common_fraction = task.get("common_heldout_fraction", 0.0)
    if common_fraction and not task.vocabulary_fraction <= common_fraction < 1.0:
      raise ValueError(f"tags.common_heldout_fraction must be 0 (none) or in [tags.vocabulary_fraction, 1) = "
                       f"[{task.vocabulary_fraction}, 1), so that its held-out labels are never fit; got "
                       f"{common_fraction}.")
    super().__init__(config, mesh, inputs)
    self.options = tag_scorers.step_options(task)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(config.model, self.tokenizer.vocab_size)
    self.num_entities = self.shapes["num_entities"] if self._data is None else self.corpus.num_entities
    self.scorer = self._scorer(task.scorer)
    self.shared_batch_keys = ("tag_tokens",) if task.scorer == "dual" else ()
    self.item_vectors: np.ndarray | None = None
    self.encoder_path = () if task.scorer == "dual" else ("bert",)  # The dual scorer's params are its BERT.
    if self._data is not None:
      self._choose_labels_and_items(common_fraction)

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> review_corpus.ReviewCorpus:
    return docent_dual.load_corpus(config)

  @classmethod
  def dataset_shapes(cls, config: ml_collections.ConfigDict) -> dict[str, int]:
    return docent_dual.known_corpus_shapes(config)

  @property
  def corpus(self) -> review_corpus.ReviewCorpus:
    return self.data

  def _choose_labels_and_items(self, common_fraction: float) -> None:
    """The labels fit and held out, and the items (movies or sentences) fit on and scored."""
    config, task = self.config, self.config.tags
    found = {s.name: s for s in tag_labels.label_sets(self.corpus, config.data.tag_vote_threshold)}
    if task.label_set not in found:
      raise base.SkipRun(f"{self.corpus.name} has no {task.label_set}.")
    self.label_set = found[task.label_set]
    num_labels = len(self.label_set.texts)
    movie_split = self.corpus.entity_split
    if task.vocabulary_fraction < 1.0:
      self.train_tags, self.heldout_tags = tag_labels.split_tag_vocabulary(
          num_labels, task.vocabulary_fraction, config.seed)
      # The held-out labels are never fit, so every movie can be fit on the training labels and scored on both.
      self.split = "all"
      # Nested splits: the labels held out at a larger fraction are among this run's held-out labels.
      self.common_tags = (tag_labels.split_tag_vocabulary(num_labels, common_fraction, config.seed)[1]
                          if common_fraction else np.arange(0))
      fit_movies = eval_movies = np.arange(self.corpus.num_entities)
    else:
      self.train_tags, self.heldout_tags, self.common_tags = np.arange(num_labels), np.arange(0), np.arange(0)
      self.split = "test"
      fit_movies, eval_movies = movie_split["train"], movie_split["test"]
    self.train_tokens = tag_scorers.label_tokens(self.tokenizer, [self.label_set.texts[t] for t in self.train_tags],
                                                 config.data.max_len)
    # Items: the movies, or (BoS-BERT) sampled sentences; `*_entity` maps each item to its movie.
    if task.get("items", "entities") == "sentences":
      corpus = self.corpus
      self.sentences = tag_scorers.subsample_per_entity(
          corpus.sentence_entity, np.arange(corpus.num_entities), config.tags.sentences_per_movie, config.seed)
      sentence_entity = corpus.sentence_entity[self.sentences]
      self.train_items, self.eval_items = (np.flatnonzero(np.isin(sentence_entity, movie_rows))
                                           for movie_rows in (fit_movies, eval_movies))
      self.train_entity, self.eval_entity = sentence_entity[self.train_items], sentence_entity[self.eval_items]
    else:
      self.train_items, self.eval_items = fit_movies, eval_movies
      self.train_entity, self.eval_entity = self.train_items, self.eval_items
    self.train_votes = self.label_set.votes[np.ix_(self.train_entity, self.train_tags)]
    labelled = self.train_votes.any(axis=1)
    if not labelled.any():
      raise base.SkipRun(f"no training movie has a known {task.label_set} label among the trained ones.")
    self.train_items, self.train_votes = self.train_items[labelled], self.train_votes[labelled]

  def _scorer(self, name: str) -> tag_scorers.TagScorer:
    encoder = bert.BertModel(self.bert_config, add_pooler=False)
    if name == "dual":
      return tag_scorers.DualScorer(encoder)
    tokenizer = self.tokenizer
    model = docent_full.DocentFull(self.bert_config, num_entities=self.num_entities)
    return tag_scorers.PairClassifierScorer(model, slot_id=tokenizer.mask_token_id, sep_id=tokenizer.sep_token_id,
                                            pad_id=tokenizer.pad_token_id,
                                            batch_size=self.config.model.inference_batch_size, mesh=self.mesh)

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One step's arrays (`tags.items_per_step` items, whatever `global_batch_size` says): the items' vectors, the
    candidate tags' tokens (at full width) and their votes: every item against shared tags (dual scorer) or
    against tags of its own (pair classifier)."""
    del global_batch_size
    items, candidates = self.options.items_per_step, self.scorer.candidates_shape(self.options)
    return {"vectors": jax.ShapeDtypeStruct((items, self.bert_config.hidden_size), jnp.float32),
            "tag_tokens": jax.ShapeDtypeStruct((*candidates, self.config.data.max_len), jnp.int32),
            "votes": jax.ShapeDtypeStruct((items, candidates[-1]), jnp.int32)}

  def start_from(self, parent: Any) -> None:
    """Takes the DOCENT model's entity vectors (frozen inputs) and its BERT (what the scorer fine-tunes)."""
    super().start_from(parent)
    _, self.item_vectors = parent.entities()

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.corpus.fingerprint()

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    bert_params = bert.BertModel(self.bert_config, add_pooler=False).init(rng, tokens, tokens)["params"]
    if self.config.tags.scorer == "dual":
      return bert_params
    head = nn.with_logical_partitioning(nn.initializers.normal(self.bert_config.initializer_range), ("embed",))
    return {"bert": bert_params, "head": {"kernel": head(jax.random.fold_in(rng, 1), (self.bert_config.hidden_size,)),
                                          "bias": jnp.zeros((), jnp.float32)}}

  def _pretrained_bert(self) -> Any:
    return pretrained.pretrained_or_fixed_bert(self.pretrained_bert, self.bert_config, self.config.seed)

  def pretrained_params(self) -> dict[str, Any]:
    """For sentence items, the pretrained BERT; for entity items nothing: the scorer fine-tunes the DOCENT
    model's BERT (`model_init`, taken by the trainer)."""
    if self.config.tags.get("items", "entities") == "sentences":
      return self._pretrained_bert()
    if self.parent is None:
      raise ValueError(f"{self.config.name}: objective 'tag_finetuning' fine-tunes a DOCENT model's BERT; set "
                       "config.model_init to that run.")
    return {}

  def _vectors(self) -> np.ndarray:
    """[num items, d] frozen item vectors: the parent model's entity table, or the encoded sentences."""
    if self.item_vectors is None:
      if self.config.tags.get("items", "entities") != "sentences":
        raise ValueError(f"{self.config.name}: no entity vectors; the run must start from a DOCENT model "
                         "(model_init).")
      config = self.config
      tokens = tokenization.tokenize_texts(self.tokenizer, [self.corpus.sentences[i] for i in self.sentences],
                                           config.data.max_len)
      self.item_vectors = tag_scorers.encode_texts(
          bert.BertModel(self.bert_config, add_pooler=False), self._pretrained_bert(), tokens,
          config.tags.sentence_pooling, batch_size=config.model.inference_batch_size, mesh=self.mesh)
    return np.asarray(self.item_vectors, np.float32)

  def train_batches(self, seed: int) -> Any:
    """One sampled step per record: training movies' vectors, candidate tags' tokens and their votes."""
    vectors = self._vectors()[self.train_items]
    rows = pipeline.process_rows(self.options.items_per_step, "tags.items_per_step")

    def step(index: int) -> dict[str, np.ndarray]:
      rng = np.random.default_rng((seed, index))
      items, tags = self.scorer.sample(rng, self.train_votes, self.options)
      # [c] tags: every item with every candidate (shared); [b, k]: each item's own.
      votes = self.train_votes[items[:, None], tags]
      local = {"vectors": vectors[items][rows], "votes": votes[rows]}
      local["tag_tokens"] = self.train_tokens[tags] if tags.ndim == 1 else self.train_tokens[tags][rows]
      return local

    return grain.MapDataset.range(np.iinfo(np.int32).max).map(step).to_iter_dataset()

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    del rng  # The scorers are deterministic (as in the paper's fine-tuning of f(t)).
    loss = self.scorer.loss(params, batch["vectors"], batch["tag_tokens"], batch["votes"],
                            self.options.vote_weighting)
    return loss, {"loss": loss}

  def inference_record(self) -> dict[str, Any]:
    """The movie of each item (its row of the item vectors)."""
    ids = self.corpus.entity_ids
    if self.config.tags.get("items", "entities") == "sentences":
      return {"entity_ids": [ids[e] for e in self.corpus.sentence_entity[self.sentences]]}
    return {"entity_ids": list(ids)}

  def create_model(self) -> movies.TagModel:
    return movies.TagModel(self.config, self.inference_record(), mesh=self.mesh, scorer=self.scorer,
                           item_vectors=self._vectors(), tokenizer=self.tokenizer)

  def evaluation_data(self) -> tag_labels.TagTask:
    return tag_labels.TagTask(self.label_set, self.train_tags, self.heldout_tags, self.common_tags,
                                  self.config.tags.vocabulary_fraction, self.split, self.eval_items, self.eval_entity)
