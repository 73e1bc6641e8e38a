# The two set-up commands of the README. Both bootstrap .venv on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3

.PHONY: run test check lint browser sandbox ssh interop acpx sdk postgres bench fixtures ts

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/acp-gateway serve $(ARGS)

# The loop to run before every commit: lint, types and the unit tests (pure rules, in-process units; no apt, no
# network, no agent, database or browser), in well under a minute. `make test` is the whole suite.
check: lint
	$(VENV)/bin/pytest -q -m unit -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check acp agents gateway tests bench fixtures
	$(VENV)/bin/mypy --strict acp agents gateway
	$(VENV)/bin/mypy --strict bench fixtures/agents/record.py --exclude bench/sdk_client.py  # that one runs on the SDK's venv
	$(VENV)/bin/mypy --strict fixtures/make_fixtures.py

# The browser test drives Debian's chromium (Playwright never downloads a browser here).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null; \
	  else echo "make test: install Debian's chromium (apt-get install chromium) for the browser test" >&2; exit 1; fi; }

# Debian's bubblewrap (and util-linux's prlimit, slirp4netns for `network = "outbound"`) for the agents' sandbox
# (`sandbox = "bwrap"`) and its tests.
sandbox:
	@command -v bwrap >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1 && command -v slirp4netns >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap util-linux slirp4netns) >/dev/null; \
	  else echo "make test: install bubblewrap and slirp4netns (apt-get install bubblewrap slirp4netns) for the sandbox tests" >&2; exit 1; fi; }

# Debian's OpenSSH (server and client) for the remote-host tests: a real sshd on loopback, started by the tests, logging
# in a Unix user of their own (tests/support/sshd.py).
ssh:
	@test -x /usr/sbin/sshd && command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq openssh-server openssh-client) >/dev/null; \
	  else echo "make test: install openssh-server (apt-get install openssh-server) for the remote-host tests" >&2; exit 1; fi; }

# Real third-party ACP peers for the interop tests, pinned: the Auggie agent; the official TypeScript SDK (with `ws`),
# whose WebSocket client drives `/acp`; and the agents whose sessions offer modes, models and config options, run
# offline (claude-agent-acp, opencode, and gemini-cli for the legacy `models`), GitHub's copilot CLI, which asks
# to be signed in, and pi-acp and qwen-code, whose protocol findings `acp-gateway check` must report. Node >= 20 comes from the npm
# registry too (the `node` package), so the machine's own Node version does not matter; only npm is needed.
# `.interop/.pins` says what is installed: a change of pins installs again.
INTEROP := .interop/node_modules
INTEROP_PINS := node@20 @augmentcode/auggie@0.36.0 @agentclientprotocol/sdk@2.4.0 ws@8.23.0 \
  @agentclientprotocol/claude-agent-acp@0.101.0 opencode-ai@1.18.33 @google/gemini-cli@0.61.0 @github/copilot@1.0.102 \
  pi-acp@0.0.24 @qwen-code/qwen-code@0.15.10
interop:
	@test "$$(cat .interop/.pins 2>/dev/null)" = "$(INTEROP_PINS)" || { \
	  command -v npm >/dev/null 2>&1 || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      (apt-get update -qq && apt-get install -y -qq npm) >/dev/null; \
	    else echo "make test: install npm (apt-get install npm) for the interop tests" >&2; exit 1; fi; }; \
	  npm install --silent --no-audit --no-fund --prefix .interop $(INTEROP_PINS) >/dev/null && \
	  echo "$(INTEROP_PINS)" > .interop/.pins; }

# acpx, the headless ACP client (it needs Node >= 22, so a prefix of its own beside .interop's Node 20), pinned:
# `acp-gateway connect` is its agent in the tests.
ACPX_PINS := node@22 acpx@0.19.1
acpx:
	@test "$$(cat .interop-acpx/.pins 2>/dev/null)" = "$(ACPX_PINS)" || { \
	  npm install --silent --no-audit --no-fund --prefix .interop-acpx $(ACPX_PINS) >/dev/null && \
	  echo "$(ACPX_PINS)" > .interop-acpx/.pins; }

# The official Python ACP SDK in a venv of its own (its import name `acp` is also ours), pinned: an agent built on
# it is checked by `acp-gateway check` in the tests, and its client is the benchmark's baseline.
SDK_VENV := .sdk-venv
SDK      := $(SDK_VENV)/.installed
$(SDK):
	test -x $(SDK_VENV)/bin/python || $(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/pip install -q 'agent-client-protocol[http]==0.12.1'
	touch $(SDK)
sdk: $(SDK)

# A PostgreSQL server for the store tests: ACP_GATEWAY_TEST_PG names one, else one answering at 127.0.0.1:5432
# is used, else the tests start a throwaway cluster with Debian's postgresql package, installed here if missing.
postgres: $(STAMP)
	@test -n "$$ACP_GATEWAY_TEST_PG" && [ "$$ACP_GATEWAY_TEST_PG" != throwaway ] || \
	  $(PY) -c "import socket; socket.create_connection(('127.0.0.1', 5432), 2)" 2>/dev/null || \
	  command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null; \
	  else echo "make test: install PostgreSQL (apt-get install postgresql) or set ACP_GATEWAY_TEST_PG" >&2; exit 1; fi; }

# The TypeScript client's build and test tools (clients/typescript, pinned by its package-lock.json), run with the
# Node.js 20 that `make interop` installs.
TS := clients/typescript
$(TS)/node_modules/.installed: $(TS)/package-lock.json | interop
	cd $(TS) && npm ci --silent --no-audit --no-fund >/dev/null && touch node_modules/.installed
ts: $(TS)/node_modules/.installed

# Two workers, a test file each at a time (its module fixtures stay in one process): most tests wait on real
# subprocesses (gateways, agents, a browser), so two cores run the suite in about 11 minutes instead of 20.
# Tests marked `serial` compare the gateway's latency under load with its own idle latency: they run alone, after.
test: lint browser sandbox ssh interop acpx sdk postgres ts
	$(VENV)/bin/pytest -q -n 2 --dist loadfile -m "not serial"
	$(VENV)/bin/pytest -q -m serial

# Benchmarks (not tests): one table, each figure beside a baseline from the same run. See bench/README.md.
# `make test` runs it at CI size (tests/bench/test_bench_smoke.py), so a bench that hangs or fails is caught there.
bench: $(STAMP) sdk sandbox postgres
	env -u PYTHONUNBUFFERED $(PY) bench/run.py

# Re-records the corpus of real agents, fixtures/agents/<agent>@<version>/ (not part of `make test`, which replays
# it): the agents `make interop` pins, and those pinned for recording only, installed into .recording/.
RECORD_PINS := @zed-industries/codex-acp@0.16.0 @mariozechner/pi-coding-agent@0.73.1 qwen-code-next@npm:@qwen-code/qwen-code@0.24.4
fixtures: $(STAMP) interop
	@test "$$(cat .recording/.pins 2>/dev/null)" = "$(RECORD_PINS)" || { \
	  npm install --silent --no-audit --no-fund --prefix .recording $(RECORD_PINS) >/dev/null && \
	  echo "$(RECORD_PINS)" > .recording/.pins; }
	$(PY) -m fixtures.agents.record $(AGENTS)
