"""A trained model in the formats other libraries read: sentence-transformers, Hugging Face, ONNX, and TensorBoard's
Projector; and a sentence-transformers directory read back as a pretrained encoder (`modules.pretrained`).

`python -m docent_jax.export --run=RUN_DIR --format=FORMAT --output=DIR` (`__main__`), or
`docent_jax.load(run).save_pretrained(DIR, format=...)` (`writer.save_pretrained`). docs/export.md says what each
format holds for each method.
"""
