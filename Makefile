# Settee: the two commands a fresh machine needs are `make cluster` and `make test`.
SHELL := /bin/bash
APT_PACKAGES := pkg-config liblz4-dev libsqlite3-dev libmemcached-tools memcached curl libjavascriptcoregtk-4.1-dev chromium chromium-driver python3-venv libqrencode-dev zbar-tools libcrypt-dev zlib1g-dev
BENCH_APT_PACKAGES := redis-server memcached libmemcached-tools
NODES ?= 1
SWIFT_BUILD_FLAGS ?=
ifeq ($(CI),true)
SWIFT_BUILD_FLAGS += -Xswiftc -warnings-as-errors
# Line tables only (backtraces keep file:line; no variable info for a debugger): the fresh debug build CI makes takes
# about a tenth less time (ADR 0100). Local builds keep full debug info, so `swift build` and `make test` share them.
SWIFT_BUILD_FLAGS += -Xswiftc -gline-tables-only -Xcc -gline-tables-only
endif

.PHONY: deps build release test lint cluster cluster-down bench bench-longrun clean torture fuzz

deps:
	@bash scripts/install-deps.sh $(APT_PACKAGES)
	@bash scripts/python-deps.sh

build: deps
	swift build $(SWIFT_BUILD_FLAGS)

release: deps
	swift build -c release

## Builds everything (tests included) and runs the whole suite: unit tests and real-process tests.
## A debug build: from a clean clone on 2 cores an optimized one (`-c release -Xswiftc -enable-testing`) halves the
## tests (312 s against ~620 s) but doubles the build (1,360 s against ~700 s), measured 2026-11-26.
test: deps
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	# At most 3 tests at once: the process tests start clusters of real servers, and 2 cores
	# running every suite at once starve their timeouts.
	# The whole output goes to .build/test-output.log; on failure the failing tests and their issues are
	# printed again at the end, where a CI log's tail shows them.
	set -o pipefail; swift test --skip-build --experimental-maximum-parallelization-width 3 2>&1 \
		| tee .build/test-output.log || { echo "=== failed tests and their issues ==="; \
		grep -E "^✘|recorded an issue|: error: -\[" .build/test-output.log | tail -60; exit 1; }

## Runs every fuzz target for FUZZ_SECONDS (default 60) each from its corpus, Tests/FuzzCorpus/<target>/
## (docs/internals/fuzzing.md); a crash leaves its input there as crash-<seed>. `make test` runs a short pass.
FUZZ_SECONDS ?= 60
fuzz: deps
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	SETTEE_FUZZ_SECONDS=$(FUZZ_SECONDS) swift test --skip-build --filter FuzzTests

## swift-format with the checked-in .swift-format; warnings fail. Then the target graph: Package.swift against
## the layer diagram in docs/ARCHITECTURE.md and the sources' imports (scripts/check-architecture.sh).
lint:
	swift format lint --strict --recursive Package.swift Sources Tests benchmarks/Package.swift benchmarks/Sources benchmarks/Benchmarks
	bash scripts/check-architecture.sh

## Builds release binaries, starts a local cluster on loopback, creates bucket `demo`, prints the URLs.
cluster: release
	@cluster/up $(NODES)

cluster-down:
	@cluster/down

## The standard suite (benchmarks/suite.json) against memcached and redis in the same run; writes
## benchmarks/results/<date>/suite/report.html (see benchmarks/README.md).
## One release build, in the benchmark package's build directory: the server, the gateway and the load
## generator share their compiled dependencies (building the root package too would compile them twice).
BENCH_BIN := $(CURDIR)/benchmarks/.build/release
bench: deps
	@bash scripts/install-deps.sh $(BENCH_APT_PACKAGES)
	# The benchmarks package's cached build plan does not see source files added to the root package (its path
	# dependency): without this, a checkout that gained a file fails with "cannot find X in scope" (2026-11-26).
	# Only the plan is dropped; compiled modules are reused.
	rm -f benchmarks/.build/release/description.json
	cd benchmarks && swift build -c release --product settee-server \
		&& swift build -c release --product settee-gateway && swift build -c release --product settee \
		&& swift build -c release --product settee-bench
	@SETTEE_SERVER_BIN=$(BENCH_BIN)/settee-server SETTEE_GATEWAY_BIN=$(BENCH_BIN)/settee-gateway \
		SETTEE_CLI_BIN=$(BENCH_BIN)/settee benchmarks/suite.sh

## Issue 71's long-run benchmark (benchmarks/README.md, ADR 0155): 10,000 documents and 1,000,000 operations through
## a gateway on a 3-node cluster bucket; metadata and disk per live document every 100,000 operations, then fresh pulls.
## Release binaries in the root build (cluster/up's default). OPS=100000 for a quick look; hours at the full size.
bench-longrun: deps
	swift build -c release --product settee-server && swift build -c release --product settee-gateway \
		&& swift build -c release --product settee-lite
	@benchmarks/longrun.sh

## The fault matrix (docs/internals/torture.md): 3 and 5 nodes in network namespaces, auto-failover on and off,
## kill / pause / isolate / isolate the orchestrator / partial partition, plus disk-full and rebalance-flap with
## auto-failover on; needs root; about 30 minutes.
## Then the cluster issue's acceptance scenario at its full size (100,000 majority writes, failover, rebalance under
## a writer; `make test` runs it with 20,000 keys), about a minute.
torture: deps
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	@bash scripts/torture.sh
	SETTEE_CLUSTER_KEYS=100000 swift test --skip-build --filter ClusterDataProcessTests

clean:
	rm -rf .build test-output cluster/data
