# Two commands set up a fresh machine: `make run` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt pyproject.toml | sha256sum | cut -c1-12)
PRESET ?= cpu
WORKERS ?= 1
GPU ?=

.PHONY: run test test-packages lint bench gpu-kit

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV) || { echo "make: python3 cannot create a virtualenv; run: sudo apt-get install -y python3-venv"; exit 1; }
	$(PY) -m pip install -q --no-compile -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	@# Byte-compiled on every core (pip compiles one file at a time; docs/benchmarks.md, "Test suite"). Sandboxes
	@# read these and cannot write their own. As pip does, a file that does not compile on this
	@# Python (torch's 3.12-only test helpers) is left out.
	$(PY) -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)'
	@rm -f $(VENV)/.installed-*; touch $@

# Creates the venv, installs, prepares the built-in data, starts server + worker, prints the URL.
# `up` first makes sure bubblewrap is installed (with apt as root, else it says the command).
run: $(STAMP)
	$(VENV)/bin/autoresearch up --preset $(PRESET) --workers $(WORKERS) $(if $(GPU),--gpu,)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy server worker client protocol harness cli testkit bench

# The system packages the tests use (cli/system_packages.py: with apt as root, else the command to
# run), then lint and the whole suite. CI runs exactly this (.ci/run).
test-packages:
	@python3 -m cli.system_packages test

# Two test processes (pytest-xdist), a file each at a time, the files marked heavy first
# (tests/conftest.py; xdist's own reordering, by test count, would start them last). A third
# process does not help: the real sandboxed runs keep both cores busy (docs/benchmarks.md, "Test
# suite"). The slowest tests are listed at the end, so that CI's log says where the time goes.
test: test-packages $(STAMP) lint
	$(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The GPU check's kit (var/gpu-kit, ignored): wheels, bubblewrap and prepared data for the lent GPU
# machine (docs/benchmarks.md, "GPU check"). Needs PyPI and the Debian mirror.
gpu-kit: $(STAMP)
	$(PY) -m bench.gpu_check.kit
