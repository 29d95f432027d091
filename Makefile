VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The third-party WHIP/WHEP browser clients the tests load (npm package whip-whep, pinned by its lock file).
WHIP_PAGE := tests/fixtures/whip_page
NODE_STAMP := $(WHIP_PAGE)/node_modules/.package-lock.json

.PHONY: install run test lint bench soak clean system-run system-test

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU wheel on this kind of machine; never let a resolver pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)
	# The face models (tflite files from the mediapipe wheel), into ~/.cache/avatar/face-models once.
	$(PY) -m engine.face.models >/dev/null

# Debian packages: installed when missing (root or sudo), else one line naming the command.
system-run:
	@.ci/system-packages run

system-test:
	@.ci/system-packages test

$(NODE_STAMP): $(WHIP_PAGE)/package-lock.json
	npm ci --prefix $(WHIP_PAGE) --no-audit --no-fund --loglevel=error

run: system-run install
	$(VENV)/bin/avatar serve --host 127.0.0.1 --port 8080

# Offline tests (marked by tests/conftest.py: the engine's models, evaluation, faces and training,
# playout on a fake clock) run on two workers, one core each; the rest streams in real time,
# serves or measures capacity live: one test at a time. A test that runs 10 minutes has hung: it fails.
test: system-test install $(NODE_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q -n 2 -m 'offline and not slow' --timeout 600
	$(PY) -m pytest -q -m 'not offline and not slow' --timeout 600

bench: install
	$(VENV)/bin/avatar bench --seconds 30

soak: install
	$(PY) -m pytest -q -s -m slow

clean:
	rm -rf $(VENV) build *.egg-info $(WHIP_PAGE)/node_modules
