"""Sentence-BERT's classification heads for siamese multi-task training (universal representations).

Each text of a pair is encoded alone (mean-pooled BERT, shared by every task); a task's head is one softmax
layer over the pair features [u, v, |u - v|], as in Sentence-BERT's NLI training and Li & Zhao's multi-task
model. Only the encoder is kept after training: the heads teach it relations between texts.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp


def siamese_features(u: jax.Array, v: jax.Array) -> jax.Array:
  """[N, 3d] features [u, v, |u - v|] of text vectors u, v [N, d]."""
  return jnp.concatenate([u, v, jnp.abs(u - v)], axis=-1)


class TaskHeads(nn.Module):
  """One linear softmax classifier per task: (u, v) -> {task: logits [N, classes]}.

  Attributes:
    tasks: (task name, number of classes) of each head; the names are the heads' param names.
    initializer_range: the standard deviation of the kernels' normal initialisation (BERT's).
  """
  tasks: tuple[tuple[str, int], ...]
  initializer_range: float = 0.02

  @nn.compact
  def __call__(self, u: jax.Array, v: jax.Array) -> dict[str, jax.Array]:
    features = siamese_features(u, v)
    return {name: nn.Dense(
        classes, name=name,
        kernel_init=nn.with_logical_partitioning(nn.initializers.normal(self.initializer_range), ("embed", None)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None,)))(features).astype(jnp.float32)
            for name, classes in self.tasks}
