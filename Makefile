VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench soak clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU wheel on this kind of machine; never let a resolver pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/avatar serve --host 127.0.0.1 --port 8080

test: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

bench: install
	$(VENV)/bin/avatar bench --seconds 30

soak: install
	$(PY) -m pytest -q -s -m slow

clean:
	rm -rf $(VENV) build *.egg-info
