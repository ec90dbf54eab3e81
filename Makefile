# Development tasks. `make test` is the fast tier (pure logic and tiny models, about a minute
# on 2 cores); `make test-all` is the full suite that CI runs (the README's test command).
PY ?= python

.PHONY: test test-all lint format schema envs vllm-check

test:
	$(PY) -m pytest -q -m "not slow"

test-all:
	$(PY) -m pytest -q

lint:
	ruff check .
	ruff format --check .
	snakemake --lint
	for c in .test/config*.yaml; do snakemake --lint --configfile "$$c" || exit 1; done

format:
	ruff format .
	ruff check --fix .

schema:  # the config schema and the generated reference pages (docs/reference/), from the code
	$(PY) -m sparta.docgen --write

envs:  # every shipped environment (envs/*.yaml, requirements files) resolved against the registry
	$(PY) -m tests.envs

# The GPU environment envs/vllm.yaml installed in a scratch venv (.vllm-check, about 8 GB, most
# of it CUDA libraries; Python 3.11 as the env), then, on the CPU: the vLLM calls the backend
# makes (tests/test_vllm_api.py) and the model tests with that env's torch and transformers.
VLLM_TESTS ?= tests/test_vllm_api.py tests/test_vllm.py tests/test_train.py tests/test_backends.py
vllm-check:
	test -x .vllm-check/bin/python || $(PY) -m venv .vllm-check
	.vllm-check/bin/pip install -q pip==25.3
	$(PY) -c "from tests.envs import read_env_file; print(*read_env_file('envs/vllm.yaml').requirements, sep='\n')" > .vllm-check/requirements.txt
	.vllm-check/bin/pip install -q -r .vllm-check/requirements.txt pytest pytest-xdist hypothesis
	PYTHONPATH=workflow .vllm-check/bin/python -m pytest -q -p no:cacheprovider -o addopts="" -m "not slow" $(VLLM_TESTS)
