# Two entry points for a fresh machine: `make demo` and `make test`.
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTHON  ?= python3

.PHONY: demo test lint system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Tools the tests use from the system (tshark checks our pcaps, iproute2/tc for the TUN tests;
# curl, openssl and wrk are the kernel-side clients of the asyncio apps tests and bench apps).
system-deps:
	@if ! command -v tshark >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1 || ! command -v tcpdump >/dev/null 2>&1 \
	    || ! command -v curl >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing tshark, tcpdump, iproute2, curl, openssl, wrk"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark tcpdump iproute2 \
	      curl openssl wrk) >/dev/null; \
	  else echo "warning: tshark/tcpdump/iproute2/curl/openssl/wrk missing and not root; tests that need them will be skipped"; fi; \
	fi

demo: $(STAMP)
	$(VENV)/bin/usertcp demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests fuzz tools
	$(VENV)/bin/mypy

test: $(STAMP) system-deps lint
	$(VENV)/bin/pytest -n 2 -q

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
