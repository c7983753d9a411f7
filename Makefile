# Each target builds .venv from pyproject.toml on a fresh machine; nothing is assumed installed but python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Playwright drives the system Chromium (tests/observe/test_page_browser.py); never let it fetch a browser.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1
# `make test` builds its environments in parallel (test-setup), and two apt-gets at once fail on dpkg's lock:
# every apt-get below takes this lock first.
APT := flock /tmp/lousho-apt.lock env DEBIAN_FRONTEND=noninteractive sh -c
# pip compiles every installed module to bytecode, one after another: 20 of the 45 s lousho's venv took to install.
# Each environment is compiled once installed instead, on every core (compile_venv).
PIP_NO_COMPILE := --no-compile
# Compile the environment at $(1) (and the sources $(2)) to bytecode, on every core. Python would compile a module
# when first imported, but where PYTHONDONTWRITEBYTECODE is set (as on CI machines) it never writes the result, and
# every process compiles what it imports again: the daemon's imports took 1.5 s of CPU instead of 0.55 s, and the
# suite, which starts hundreds of processes, a quarter more (1,507 s of user CPU against 1,222 s; docs/performance.md,
# "The test suite"). A module that does not compile is left to Python, as pip leaves it.
compile_venv = $(1)/bin/python -m compileall -qq -j0 $(1)/lib $(2) >/dev/null || \
	echo "some modules of $(1) did not compile to bytecode; Python compiles them when they are imported"
# A venv at $(1), installing python3-venv first where Debian leaves it out.
make_venv = test -x $(1)/bin/python || $(PYTHON) -m venv $(1) || { \
	echo "python3 -m venv failed; installing python3-venv"; \
	$(APT) 'apt-get update -qq && apt-get install -y -qq python3-venv' && $(PYTHON) -m venv $(1); }

.PHONY: demo example test test-setup lint bench bench-heal clean postgres chromium agent-venvs node-frameworks lake-venv demo-fleet

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "lousho needs Python >= 3.11"'
	@$(call make_venv,$(VENV))
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(PIP_NO_COMPILE) -e '.[dev]'
	@$(call compile_venv,$(VENV),lousho examples)
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/lousho demo

# Bring your own agent: an agent on the plain openai SDK heals itself through the daemon's trigger
# (examples/openai-agent/README.md); prints each step, exit 1 if one does not happen.
example: $(STAMP)
	$(BIN)/python examples/openai-agent/demo.py --dir .lousho/example

lint: $(STAMP)
	$(BIN)/ruff check lousho tests benchmarks notebooks examples

# The recover tests start a throwaway Postgres server (tests/recover/pg_support.py). Debian keeps initdb off PATH,
# under /usr/lib/postgresql/<version>/bin; install the server package when no version is there. The Debian package
# may start a cluster of its own on port 5432: the tests never use it (theirs runs on a free port, as `postgres`).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "initdb not found under /usr/lib/postgresql/*/bin; installing postgresql"; \
		$(APT) 'apt-get update -qq && apt-get install -y -qq postgresql >/dev/null'; }

# The page's browser test runs Debian's Chromium headless; install the package when /usr/bin/chromium is missing.
chromium:
	@test -x /usr/bin/chromium || { \
		echo "/usr/bin/chromium not found; installing chromium"; \
		$(APT) 'apt-get update -qq && apt-get install -y -qq chromium >/dev/null'; }

# Agents of tests/frameworks/ that must not share lousho's venv run in venvs of their own, as a user's agent would:
# .venv-NAME from tests/frameworks/NAME/requirements.txt (zero-code tracing loads every instrumentation installed;
# LlamaIndex needs an openai that Pydantic AI does not take).
AGENT_VENVS := $(patsubst tests/frameworks/%/requirements.txt,.venv-%/.installed,$(wildcard tests/frameworks/*/requirements.txt))

.venv-%/.installed: tests/frameworks/%/requirements.txt
	@$(call make_venv,.venv-$*)
	.venv-$*/bin/python -m pip install -q $(PIP_NO_COMPILE) -r $<
	@$(call compile_venv,.venv-$*)
	@touch $@

agent-venvs: $(AGENT_VENVS)

# The Vercel AI SDK's agent (tests/frameworks/test_vercel.py) runs on Node: its packages come from npm, exactly as
# its package-lock.json pins them (npm ci), once per change of the lock. Install Debian's nodejs and npm when either
# is missing; a Node older than the packages' engines fails the install (engine-strict in the agent's .npmrc).
NODE_AGENT := tests/frameworks/vercel
NODE_STAMP := $(NODE_AGENT)/node_modules/.installed

$(NODE_STAMP): $(NODE_AGENT)/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		echo "node or npm not found; installing nodejs and npm"; \
		$(APT) 'apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null'; }
	cd $(NODE_AGENT) && npm ci --no-audit --no-fund
	@touch $(NODE_STAMP)

node-frameworks: $(NODE_STAMP)

# The fleet's lake (lousho observe --lake) runs in an environment of its own: DuckLake's extensions exist on PyPI only
# for DuckDB 1.5.5, and lousho's store is on DuckDB 2. The daemon finds it beside .venv (or at $LOUSHO_LAKE_PYTHON).
.venv-lake/.installed: lousho/observe/lake/requirements.txt
	@$(call make_venv,.venv-lake)
	.venv-lake/bin/python -m pip install -q $(PIP_NO_COMPILE) -r lousho/observe/lake/requirements.txt
	@$(call compile_venv,.venv-lake)
	@touch $@

lake-venv: .venv-lake/.installed

# The fleet: three daemons, one Postgres (the lake's catalog), agents sending to each, one query seeing all
# (examples/fleet/demo.py; docs/observe.md "The fleet").
demo-fleet: $(STAMP) postgres lake-venv
	$(BIN)/python examples/fleet/demo.py

# The environments build side by side (pip waits on the network and the compiler, not on each other): on 2 cores
# that took the setup from 115 s to 79 s on a machine with the Debian packages in place.
test:
	@$(MAKE) --no-print-directory -j4 test-setup
	$(BIN)/python -m pytest -q -n auto --dist loadfile

test-setup: $(STAMP) lint postgres chromium agent-venvs node-frameworks lake-venv

bench: $(STAMP)
	$(BIN)/python benchmarks/perf/ingest.py
	$(BIN)/python benchmarks/perf/query.py

# The heal benchmark: every scenario at full count on the scripted policy, then the report (exit 1 on NO-GO or
# INCOMPLETE). About 5 minutes on 2 cores; docs/benchmarks.md has the last report.
HEAL_OUT := .lousho/bench/heal.jsonl
bench-heal: $(STAMP)
	$(BIN)/lousho bench heal --scenarios all --attempts full --out $(HEAL_OUT)
	$(BIN)/lousho bench heal --report --out $(HEAL_OUT) > $(HEAL_OUT:.jsonl=.report.txt); \
		status=$$?; cat $(HEAL_OUT:.jsonl=.report.txt); exit $$status

clean:
	rm -rf $(VENV) .venv-* .lousho .pytest_cache .ruff_cache $(NODE_AGENT)/node_modules
