# Development tasks. `make test` is the fast tier (pure logic and tiny models, under 3 minutes
# on 2 cores); `make test-all` is the full suite that CI runs (the README's test command).
PY ?= python

.PHONY: test test-all lint format schema

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

schema:  # the config schema and README.md's constants table, from the settings dataclasses
	$(PY) -m sparta.schema --write
