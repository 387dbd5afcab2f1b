# Two entry points for a fresh machine: `make demo` and `make test`.
# The interpreter comes from the environment: `PYTHON=python3.12 VENV=.venv-3.12 make test`.
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
# Exact versions of everything the tests install; pyproject.toml only declares ranges.
CONSTRAINTS := constraints.txt

.PHONY: demo test lint system-deps constraints clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

# Rewrite constraints.txt from the current test environment (after changing a range or a version).
constraints: $(STAMP)
	{ echo "# Exact versions of the test environment (make test installs with pip -c constraints.txt)."; \
	  echo "# Runtime ranges are in pyproject.toml; regenerate with: make constraints"; \
	  $(PY) -m pip freeze --exclude-editable --all | grep -v '^pip=='; } > $(CONSTRAINTS)

# Tools the tests use from the system: tshark checks our pcaps, iproute2/tc for the TUN tests,
# memcached is the reference the cache app is compared with byte for byte, curl, openssl and wrk
# are the kernel-side clients of the asyncio apps tests and bench apps.
SYSTEM_TOOLS := tshark tcpdump tc memcached curl openssl wrk
system-deps:
	@missing=0; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null 2>&1 || missing=1; done; \
	if [ $$missing = 1 ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing tshark, tcpdump, iproute2, memcached, curl, openssl, wrk"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark tcpdump iproute2 \
	      memcached curl openssl wrk) >/dev/null; \
	  else echo "warning: some of $(SYSTEM_TOOLS) missing and not root; tests that need them will be skipped"; fi; \
	fi

demo: $(STAMP)
	$(VENV)/bin/usertcp demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests fuzz tools
	$(VENV)/bin/mypy

test: $(STAMP) system-deps lint
	$(VENV)/bin/pytest -n 2 -q

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
