"""Knowledge-graph scoring functions: TransE, DistMult, ComplEx and SimplE, as used by BLP.

Each function scores (head, relation, tail) from entity vectors of size `d` and relation rows of
size `relation_dim(d)`. Besides the elementwise `score`, each ranks a set of candidate entities for
many queries at once (`score_tails`, `score_heads`), which is what link-prediction evaluation and
1-N training need. All arithmetic is float32.
"""
import abc
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp


def _float32(x: jax.Array) -> jax.Array:
  return jnp.asarray(x, jnp.float32)


def _halves(x: jax.Array, what: str) -> tuple[jax.Array, jax.Array]:
  """Splits the last axis in two equal parts; shapes are static, so this fails at trace time."""
  if x.shape[-1] % 2:
    raise ValueError(f"{what} needs an even last dimension, got shape {x.shape}.")
  half = x.shape[-1] // 2
  return x[..., :half], x[..., half:]


def _l2_normalize(x: jax.Array) -> jax.Array:
  # The floor keeps a zero vector at zero instead of producing NaN.
  norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
  return x / jnp.maximum(norm, 1e-12)


class ScoringFunction(abc.ABC):
  """Interface shared by the scoring functions; higher scores mean more plausible triples."""

  name: ClassVar[str]

  @abc.abstractmethod
  def relation_dim(self, entity_dim: int) -> int:
    """Size of one relation embedding row for entities of size `entity_dim`."""

  @abc.abstractmethod
  def score(self, head: jax.Array, relation: jax.Array, tail: jax.Array) -> jax.Array:
    """Scores of explicit triples: [..., d], [..., dr], [..., d] (broadcast) -> [...]."""

  @abc.abstractmethod
  def score_tails(self, head: jax.Array, relation: jax.Array, candidates: jax.Array) -> jax.Array:
    """Scores of (head[q], relation[q], candidates[c]): [Q, d], [Q, dr], [C, d] -> [Q, C]."""

  @abc.abstractmethod
  def score_heads(self, relation: jax.Array, tail: jax.Array, candidates: jax.Array) -> jax.Array:
    """Scores of (candidates[c], relation[q], tail[q]): [Q, dr], [Q, d], [C, d] -> [Q, C]."""


class BilinearScoringFunction(ScoringFunction):
  """A score that is linear in the tail and in the head: ranking is one matmul per direction.

  `tail_query(h, r)` is the vector q with score(h, r, t) = <q, t>, and `head_query(r, t)` the
  vector q with score(h, r, t) = <q, h>; candidates are used as they are.
  """

  @abc.abstractmethod
  def tail_query(self, head: jax.Array, relation: jax.Array) -> jax.Array:
    """[..., d], [..., dr] -> [..., d]."""

  @abc.abstractmethod
  def head_query(self, relation: jax.Array, tail: jax.Array) -> jax.Array:
    """[..., dr], [..., d] -> [..., d]."""

  def score_tails(self, head: jax.Array, relation: jax.Array, candidates: jax.Array) -> jax.Array:
    return _match(self.tail_query(head, relation), candidates)

  def score_heads(self, relation: jax.Array, tail: jax.Array, candidates: jax.Array) -> jax.Array:
    return _match(self.head_query(relation, tail), candidates)


def _match(queries: jax.Array, candidates: jax.Array) -> jax.Array:
  return jnp.einsum("qd,cd->qc", _float32(queries), _float32(candidates), preferred_element_type=jnp.float32)


@dataclasses.dataclass(frozen=True)
class TransE(ScoringFunction):
  """score = -|| normalize(h) + r - normalize(t) ||_1, with L2-normalised entities as in BLP.

  The L1 distance is no matmul; `score_tails`/`score_heads` compute it over blocks of
  `candidate_block` candidates, so intermediates stay within [Q, candidate_block, d].
  """

  name: ClassVar[str] = "transe"
  candidate_block: int = 512

  def relation_dim(self, entity_dim: int) -> int:
    return entity_dim

  def score(self, head: jax.Array, relation: jax.Array, tail: jax.Array) -> jax.Array:
    translated = _l2_normalize(_float32(head)) + _float32(relation)
    return -jnp.sum(jnp.abs(translated - _l2_normalize(_float32(tail))), axis=-1)

  def score_tails(self, head: jax.Array, relation: jax.Array, candidates: jax.Array) -> jax.Array:
    return self._negative_l1(_l2_normalize(_float32(head)) + _float32(relation), candidates)

  def score_heads(self, relation: jax.Array, tail: jax.Array, candidates: jax.Array) -> jax.Array:
    # ||h + r - t|| = ||h - (t - r)||, so head prediction is the same distance to t - r.
    return self._negative_l1(_l2_normalize(_float32(tail)) - _float32(relation), candidates)

  def _negative_l1(self, queries: jax.Array, candidates: jax.Array) -> jax.Array:
    candidates = _l2_normalize(_float32(candidates))

    def block_distances(candidate: jax.Array) -> jax.Array:
      return jnp.sum(jnp.abs(queries - candidate), axis=-1)

    distances = jax.lax.map(block_distances, candidates, batch_size=self.candidate_block)  # [C, Q]
    return -distances.T


@dataclasses.dataclass(frozen=True)
class DistMult(BilinearScoringFunction):
  """score = <h, r, t> = sum(h * r * t)."""

  name: ClassVar[str] = "distmult"

  def relation_dim(self, entity_dim: int) -> int:
    return entity_dim

  def score(self, head: jax.Array, relation: jax.Array, tail: jax.Array) -> jax.Array:
    return jnp.sum(_float32(head) * _float32(relation) * _float32(tail), axis=-1)

  def tail_query(self, head: jax.Array, relation: jax.Array) -> jax.Array:
    return _float32(head) * _float32(relation)

  def head_query(self, relation: jax.Array, tail: jax.Array) -> jax.Array:
    return _float32(relation) * _float32(tail)


@dataclasses.dataclass(frozen=True)
class ComplEx(BilinearScoringFunction):
  """score = Re(<h, r, conj(t)>); vectors hold the real half first, then the imaginary half."""

  name: ClassVar[str] = "complex"

  def relation_dim(self, entity_dim: int) -> int:
    if entity_dim % 2:
      raise ValueError(f"ComplEx needs an even entity dimension, got {entity_dim}.")
    return entity_dim

  def score(self, head: jax.Array, relation: jax.Array, tail: jax.Array) -> jax.Array:
    h_re, h_im = _halves(_float32(head), "ComplEx head")
    r_re, r_im = _halves(_float32(relation), "ComplEx relation")
    t_re, t_im = _halves(_float32(tail), "ComplEx tail")
    return jnp.sum(h_re * r_re * t_re + h_im * r_re * t_im + h_re * r_im * t_im - h_im * r_im * t_re, axis=-1)

  def tail_query(self, head: jax.Array, relation: jax.Array) -> jax.Array:
    # Re(h r conj(t)) = Re(h r) . t_re + Im(h r) . t_im
    h_re, h_im = _halves(_float32(head), "ComplEx head")
    r_re, r_im = _halves(_float32(relation), "ComplEx relation")
    return jnp.concatenate([h_re * r_re - h_im * r_im, h_im * r_re + h_re * r_im], axis=-1)

  def head_query(self, relation: jax.Array, tail: jax.Array) -> jax.Array:
    # Re(h w) with w = r conj(t): h_re . Re(w) - h_im . Im(w)
    r_re, r_im = _halves(_float32(relation), "ComplEx relation")
    t_re, t_im = _halves(_float32(tail), "ComplEx tail")
    return jnp.concatenate([r_re * t_re + r_im * t_im, r_re * t_im - r_im * t_re], axis=-1)


@dataclasses.dataclass(frozen=True)
class SimplE(BilinearScoringFunction):
  """score = 0.5 (<h_head, r, t_tail> + <t_head, r_inv, h_tail>).

  An entity vector is [head role | tail role] and a relation row is [r | r_inv], each half d / 2,
  so relations have the entity dimension.
  """

  name: ClassVar[str] = "simple"

  def relation_dim(self, entity_dim: int) -> int:
    if entity_dim % 2:
      raise ValueError(f"SimplE needs an even entity dimension, got {entity_dim}.")
    return entity_dim

  def score(self, head: jax.Array, relation: jax.Array, tail: jax.Array) -> jax.Array:
    h_head, h_tail = _halves(_float32(head), "SimplE head")
    r, r_inv = _halves(_float32(relation), "SimplE relation")
    t_head, t_tail = _halves(_float32(tail), "SimplE tail")
    return 0.5 * (jnp.sum(h_head * r * t_tail, axis=-1) + jnp.sum(t_head * r_inv * h_tail, axis=-1))

  def tail_query(self, head: jax.Array, relation: jax.Array) -> jax.Array:
    h_head, h_tail = _halves(_float32(head), "SimplE head")
    r, r_inv = _halves(_float32(relation), "SimplE relation")
    return 0.5 * jnp.concatenate([r_inv * h_tail, h_head * r], axis=-1)

  def head_query(self, relation: jax.Array, tail: jax.Array) -> jax.Array:
    r, r_inv = _halves(_float32(relation), "SimplE relation")
    t_head, t_tail = _halves(_float32(tail), "SimplE tail")
    return 0.5 * jnp.concatenate([r * t_tail, r_inv * t_head], axis=-1)


SCORING_FUNCTIONS: dict[str, ScoringFunction] = {
    fn.name: fn for fn in (TransE(), DistMult(), ComplEx(), SimplE())
}


def get_scoring_function(name: str) -> ScoringFunction:
  """The scoring function registered as `name` (case-insensitive)."""
  key = name.lower()
  if key not in SCORING_FUNCTIONS:
    raise ValueError(f"Unknown scoring function {name!r}; valid: {sorted(SCORING_FUNCTIONS)}.")
  return SCORING_FUNCTIONS[key]
