"""Binary classifiers of offer pairs (match / no match) for product matching (Peeters & Bizer).

Two models, each giving one logit per pair; `evaluation.pair_matching` fine-tunes and scores both:
  * `PairClassifier` (bi-encoder): each offer is encoded alone by BERT, mean-pooled over its
    non-padding tokens (the offer encoder that supervised contrastive pre-training trains), and a
    head scores the pair features [u, v, |u - v|, u * v].
  * `CrossEncoder`: BERT reads both offers at once, `[CLS] a [SEP] b [SEP]` with token types 0 / 1
    (RoBERTa: `<s> a </s></s> b </s>`, all type 0), and a head scores the first token's output (BERT's
    pooler is not used).
The bi-encoder's head is dropout (BERT's hidden dropout rate) followed by one linear unit, as in
Peeters and Bizer's released code, whose classification head has no hidden layer: with a frozen
encoder, fine-tuning is a logistic regression on the pair features. The cross-encoder uses the same head.

Inputs are [batch, 2, length] int arrays, one layout for both models: the two offers' token ids for
the bi-encoder, the pair's token ids and token types for the cross-encoder. Both models take the
tokenizer's padding id (`pad_token_id`: BERT's 0, RoBERTa's 1).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from docent_jax.modules import bert

# The pair features of the bi-encoder: [u, v, |u - v|, u * v].
NUM_PAIR_FEATURES = 4


def pair_features(u: jax.Array, v: jax.Array) -> jax.Array:
  """[N, 4d] features [u, v, |u - v|, u * v] of offer vectors u, v [N, d] (as in Sentence-BERT)."""
  return jnp.concatenate([u, v, jnp.abs(u - v), u * v], axis=-1)


def _check_pair_inputs(inputs: jax.Array) -> None:
  if inputs.ndim != 3 or inputs.shape[1] != 2:
    raise ValueError(f"Expected pair inputs [batch, 2, ...]; got shape {inputs.shape}.")


class LogitHead(nn.Module):
  """Dropout, then one linear unit: features [N, f] -> logits [N]."""
  config: bert.BertConfig
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, features: jax.Array, *, deterministic: bool = True) -> jax.Array:
    x = nn.Dropout(self.config.hidden_dropout_prob)(features, deterministic=deterministic)
    logits = nn.Dense(
        1, dtype=self.dtype, name="output",
        kernel_init=nn.with_logical_partitioning(nn.initializers.normal(self.config.initializer_range),
                                                 ("embed", None)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None,)))(x)
    return logits[..., 0].astype(jnp.float32)


class PairClassifier(nn.Module):
  """Bi-encoder: mean-pooled BERT vectors u, v of the two offers -> head([u, v, |u - v|, u * v]).

  Params: 'bert' (a `BertModel` without pooler, as pretrained or contrastively trained) and 'head'.
  `encode` and `classify` are the two halves, so that a frozen encoder's vectors can be computed
  once and only the head trained on them.
  """
  config: bert.BertConfig
  dtype: jnp.dtype = jnp.float32
  pad_token_id: int = 0

  def setup(self):
    self.bert = bert.BertModel(self.config, dtype=self.dtype, add_pooler=False, name="bert")
    self.head = LogitHead(self.config, self.dtype, name="head")

  def __call__(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    """Logits [B] of token ids [B, 2, L] (padded with `pad_token_id`): both offers go through BERT in one batch."""
    _check_pair_inputs(tokens)
    batch, _, length = tokens.shape
    vectors = self.encode(tokens.reshape(2 * batch, length), deterministic=deterministic)
    return self.classify(vectors.reshape(batch, 2, -1), deterministic=deterministic)

  def encode(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    """Offer vectors [N, d]: BERT's outputs for token ids [N, L], averaged over the non-padding tokens."""
    mask = (tokens != self.pad_token_id).astype(jnp.int32)
    hidden = self.bert(tokens, mask, deterministic=deterministic).last_hidden_state
    return bert.mean_pool(hidden, mask).astype(jnp.float32)

  def classify(self, vectors: jax.Array, *, deterministic: bool = True) -> jax.Array:
    """Logits [B] of the offer vectors [B, 2, d] of each pair (left, right)."""
    _check_pair_inputs(vectors)
    return self.head(pair_features(vectors[:, 0], vectors[:, 1]), deterministic=deterministic)


class CrossEncoder(nn.Module):
  """Cross-encoder: BERT over `[CLS] a [SEP] b [SEP]` -> head([CLS] output).

  Params: 'bert' (a `BertModel` without pooler) and 'head'.
  """
  config: bert.BertConfig
  dtype: jnp.dtype = jnp.float32
  pad_token_id: int = 0

  def setup(self):
    # RoBERTa's pairs are all token type 0 (its one type), told apart by the separators alone.
    if self.config.model_type == "bert" and self.config.type_vocab_size < 2:
      raise ValueError(f"A BERT cross-encoder needs token types 0 and 1; the config has type_vocab_size "
                       f"{self.config.type_vocab_size}.")
    self.bert = bert.BertModel(self.config, dtype=self.dtype, add_pooler=False, name="bert")
    self.head = LogitHead(self.config, self.dtype, name="head")

  def __call__(self, inputs: jax.Array, *, deterministic: bool = True) -> jax.Array:
    """Logits [B] of inputs [B, 2, L]: the pair's token ids (padded with `pad_token_id`), then its token types."""
    _check_pair_inputs(inputs)
    tokens, token_types = inputs[:, 0], inputs[:, 1]
    output = self.bert(tokens, (tokens != self.pad_token_id).astype(jnp.int32), token_types,
                       deterministic=deterministic)
    return self.head(output.last_hidden_state[:, 0], deterministic=deterministic)
