# Python SDK: included by the top Makefile (sdk/*/sdk.mk).
# test-sdk-python makes a venv under sdk/python/.venv (git-ignored), installs
# the package with its test extras (the stubs are generated from
# proto/spool/v1 by the package build), builds spoold and runs pytest
# against real spoold and redis-server processes.
PY_SDK := sdk/python
PY_VENV := $(PY_SDK)/.venv
PYTHON ?= python3

.PHONY: build-sdk-python test-sdk-python
## build-sdk-python: the venv with the SDK and its test extras installed.
build-sdk-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the Python SDK needs Python 3.11 or later: set PYTHON=python3.11")'
	@test -x $(PY_VENV)/bin/python || $(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q --disable-pip-version-check './$(PY_SDK)[test]'

test-sdk-python: deps build-sdk-python
	@mkdir -p $(PY_SDK)/build
	$(GO) build -o $(PY_SDK)/build/spoold ./cmd/spoold
	cd $(PY_SDK) && SPOOLD_BIN=$(CURDIR)/$(PY_SDK)/build/spoold .venv/bin/python -m pytest -q -p no:cacheprovider tests

SDK_TESTS += test-sdk-python
