# Two entry points for a fresh machine: `make demo` and `make test`.
# The interpreter comes from the environment: `PYTHON=python3.12 VENV=.venv-3.12 make test`.
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
# Exact versions of everything the tests install; pyproject.toml only declares ranges.
CONSTRAINTS := constraints.txt

.PHONY: demo test test-pure compiled lint system-deps constraints clean

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

# --- the compiled build (mypyc, see setup.py) -------------------------------------------
# The editable install in .venv stays pure Python. `make test` and `make demo` put a
# compiled build of the same sources first on the path when a C compiler is present:
# build/compiled holds the whole package, the per-packet modules as extension modules.
# It is rebuilt when any source changes (only the changed modules' C is recompiled).
COMPILED := build/compiled
HAVE_CC  := $(shell command -v $${CC:-cc} >/dev/null 2>&1 && echo yes)
ifeq ($(HAVE_CC)$(USERTCP_PURE),yes)
RUN := PYTHONPATH=$(CURDIR)/$(COMPILED)
$(COMPILED)/.stamp: $(STAMP) setup.py pyproject.toml $(shell find src -name '*.py' -o -name py.typed)
	USERTCP_COMPILE=1 $(PY) setup.py -q build --build-lib $(COMPILED) --build-temp build/temp -j 2
	touch $@
compiled: $(COMPILED)/.stamp
else
RUN :=
compiled:
	@echo "no C compiler (or USERTCP_PURE=1): running the pure-Python build"
endif

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

# The demo runs the compiled build when an up-to-date one is there (make test or make compiled
# built it), else the pure sources: it never waits for a compile, never runs a stale build.
FRESH := $(shell test -f $(COMPILED)/.stamp && test -z "$$(find src setup.py pyproject.toml -newer \
           $(COMPILED)/.stamp \( -name '*.py' -o -name pyproject.toml \) -print -quit)" && echo yes)
DEMO_RUN := $(if $(and $(RUN),$(FRESH)),$(RUN))
demo: $(STAMP)
	$(DEMO_RUN) $(VENV)/bin/usertcp --version
	$(DEMO_RUN) $(VENV)/bin/usertcp demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests fuzz tools
	$(VENV)/bin/mypy

# The whole suite on the compiled build (pure if there is no compiler).
test: $(STAMP) system-deps lint compiled
	$(RUN) $(VENV)/bin/usertcp --version
	$(RUN) $(VENV)/bin/pytest -n 2 -q

# The fast tests on the pure-Python reference build (CI runs both).
test-pure: $(STAMP) system-deps
	USERTCP_PURE=1 $(VENV)/bin/usertcp --version
	USERTCP_PURE=1 $(VENV)/bin/pytest -n 2 -q -m "not slow and not netns"

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
