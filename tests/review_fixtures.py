"""A tiny review corpus (review TSV layout) and a tiny DOCENT config over it, for objective tests."""
import pathlib

from configs import docent
import tiny_training

_THEMES = {
    "space": "a space crew of astronauts explores distant planets and alien worlds",
    "horror": "a horror house full of ghosts and screaming victims at midnight",
    "romance": "a romance where two lovers meet in paris and fall in love over dinner",
    "western": "a western where a lonely cowboy rides his horse to a dusty saloon",
}
NUM_ENTITIES = 16


def write_tiny_reviews(directory: pathlib.Path) -> pathlib.Path:
  """16 movies in 4 themes, 6 reviews each; each movie's theme is also its tag."""
  directory.mkdir(parents=True, exist_ok=True)
  themes = list(_THEMES)
  reviews, tags = [], []
  for movie in range(NUM_ENTITIES):
    theme = themes[movie % len(themes)]
    for review in range(6):
      reviews.append(f"m{movie}\tReview {review} of film {movie}: {_THEMES[theme]}. I liked it, movie {movie}.")
    tags.append(f"m{movie}\t{theme}\t{1 + movie % 3}")
  (directory / "reviews.tsv").write_text("\n".join(reviews) + "\n")
  (directory / "tags.tsv").write_text("\n".join(tags) + "\n")
  return directory


def tiny_config(reviews_dir, tfds_dir, negatives="in_batch", variant="dual"):
  config = tiny_training.shrink(docent.get_config(f"{variant},{reviews_dir}"), tfds_dir, max_len=24)
  config.loss.negatives = negatives
  config.tags.finetune_steps = 8
  config.tags.learning_rate = 1e-3
  config.tags.items_per_step = 8  # Rows split over the 8 test devices.
  config.tags.tags_per_step = 2  # Below the 4 tags: candidates are sampled.
  config.tags.sentences_per_movie = 2  # And the bos search baseline's: one reference.
  return config
