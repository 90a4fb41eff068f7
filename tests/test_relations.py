"""Scoring functions: hand-computed scores, and ranking all candidates equals scoring each triple."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax.modules import relations

ALL_NAMES = sorted(relations.SCORING_FUNCTIONS)


@pytest.mark.parametrize("name, head, relation, tail, expected", [
    # 1*3*5 + 2*4*6
    ("distmult", [1., 2.], [3., 4.], [5., 6.], 63.0),
    # (1+2i)(3+4i) = -5+10i; times conj(5+6i) = 35+80i
    ("complex", [1., 2.], [3., 4.], [5., 6.], 35.0),
    # 0.5 * (<[1,2],[1,1],[0,1]> + <[1,0],[2,0],[3,4]>) = 0.5 * (2 + 6)
    ("simple", [1., 2., 3., 4.], [1., 1., 2., 0.], [1., 0., 0., 1.], 4.0),
    # normalize([3,4]) = [.6,.8]; + [1,-1] - normalize([0,2]) = [1.6,-1.2]; L1 = 2.8
    ("transe", [3., 4.], [1., -1.], [0., 2.], -2.8),
])
def test_known_scores(name, head, relation, tail, expected):
  scoring_fn = relations.get_scoring_function(name)
  score = scoring_fn.score(jnp.array(head), jnp.array(relation), jnp.array(tail))
  assert score.dtype == jnp.float32
  np.testing.assert_allclose(score, expected, rtol=1e-6)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_candidate_scores_match_explicit_triples(name):
  scoring_fn = relations.get_scoring_function(name)
  dim, num_queries, num_candidates = 6, 5, 7
  keys = jax.random.split(jax.random.key(0), 4)
  head = jax.random.normal(keys[0], (num_queries, dim))
  relation = jax.random.normal(keys[1], (num_queries, scoring_fn.relation_dim(dim)))
  tail = jax.random.normal(keys[2], (num_queries, dim))
  candidates = jax.random.normal(keys[3], (num_candidates, dim))

  tails_scores = jax.jit(scoring_fn.score_tails)(head, relation, candidates)
  heads_scores = jax.jit(scoring_fn.score_heads)(relation, tail, candidates)
  assert tails_scores.shape == heads_scores.shape == (num_queries, num_candidates)
  expected_tails = scoring_fn.score(head[:, None], relation[:, None], candidates[None, :])
  expected_heads = scoring_fn.score(candidates[None, :], relation[:, None], tail[:, None])
  np.testing.assert_allclose(tails_scores, expected_tails, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(heads_scores, expected_heads, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("candidate_block", [1, 3, 64])
def test_transe_blocks_cover_every_candidate(candidate_block):
  # Blocks that do and do not divide the 7 candidates, and one larger than all of them.
  scoring_fn = relations.TransE(candidate_block=candidate_block)
  keys = jax.random.split(jax.random.key(1), 3)
  head, relation = jax.random.normal(keys[0], (4, 8)), jax.random.normal(keys[1], (4, 8))
  candidates = jax.random.normal(keys[2], (7, 8))
  expected = scoring_fn.score(head[:, None], relation[:, None], candidates[None, :])
  np.testing.assert_allclose(scoring_fn.score_tails(head, relation, candidates), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["distmult", "complex", "simple"])
def test_bilinear_ranking_is_one_matmul(name):
  scoring_fn = relations.get_scoring_function(name)
  head, relation, candidates = jnp.ones((3, 4)), jnp.ones((3, 4)), jnp.ones((9, 4))
  for jaxpr in (jax.make_jaxpr(scoring_fn.score_tails)(head, relation, candidates),
                jax.make_jaxpr(scoring_fn.score_heads)(relation, head, candidates)):
    primitives = [equation.primitive.name for equation in jaxpr.jaxpr.eqns]
    assert primitives.count("dot_general") == 1


def test_bfloat16_inputs_score_in_float32():
  scoring_fn = relations.get_scoring_function("distmult")
  head = jnp.array([[1., 2.]], jnp.bfloat16)
  scores = scoring_fn.score_tails(head, head, jnp.array([[3., 4.]], jnp.bfloat16))
  assert scores.dtype == jnp.float32
  np.testing.assert_allclose(scores, [[19.0]])


def test_registry_and_errors():
  assert relations.get_scoring_function("DistMult") is relations.SCORING_FUNCTIONS["distmult"]
  assert relations.get_scoring_function("transe").relation_dim(128) == 128
  with pytest.raises(ValueError, match=r"'rotate'.*valid: \['complex', 'distmult', 'simple', 'transe'\]"):
    relations.get_scoring_function("rotate")
  with pytest.raises(ValueError, match="even entity dimension"):
    relations.get_scoring_function("complex").relation_dim(5)
  with pytest.raises(ValueError, match="SimplE head needs an even last dimension"):
    relations.get_scoring_function("simple").score(jnp.ones(3), jnp.ones(4), jnp.ones(4))
