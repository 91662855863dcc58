# dlock: see README.md.
GO ?= go

.PHONY: all build test test-lib demo bench redis faketime vet fuzz soak verify reliability release-check release-prepare

all: build

build:
	$(GO) build ./...

# Make sure redis-server is there (installed from Debian's package when
# missing and running as root), and libfaketime for the clock-fault tests
# (likewise; they are skipped without it), then vet and run every test under the race
# detector against real redis-server processes started by the tests.
# The CLI is vetted for macOS too, the library is built for Windows, and
# the CLI must not link test helpers; the allocation check runs once more
# without the race detector (which costs go-redis a few allocations), with
# its real limit, on either go-redis; and every module under extra/, and
# examples/ (each its own go.mod), is vetted and tested the same way
# (allocation checks without -race), three modules at once
# (tools/testmodules.sh); examples/' test runs each program against a
# redis-server.
# The history check runs 10s per topology in the first pass (make soak
# runs it for as long as asked); the explorer (internal/history's
# TestExplore and TestExploreSabotage, and each extra's TestExplore) a few
# seconds per topology and family, under a minute in all (make verify runs
# it for as long as asked). The root package's tests where the go-redis
# version changes what dlock does (LATEST_TESTS below) also run against the
# newest go-redis v9 (go.redis-latest.mod; go.mod requires the oldest
# supported one), and internal/quorum's (the
# client's call path) whole; the rest of the root package is dlock's own
# logic, the same with any go-redis, and runs once, to keep make test
# within its time. The parallel tests mostly wait (TestHistory among them);
# the go-redis-latest pass runs 4 of them at once (-parallel 4; the default
# is GOMAXPROCS, 2 on the CI machine), the first pass the default number,
# as cmd/dlock's timed tests run alongside it there. Last,
# while the modules' tests run, tools/testservers.sh runs the contract
# suite, the history checker (5s a topology) and the fault tests of the
# server's own behaviour on Valkey and Redis 8 (../shared/servers/, where
# they exist: a developer's machine and CI; skipped, saying so,
# elsewhere), its output printed after the modules'. Both mostly wait
# (schedules, fault windows, worker processes): side by side they keep
# make test within 15 minutes on 2 cores, one after the other they did not.
#
# The root package's tests that run again on the newest go-redis (see
# above): those where the go-redis version changes what dlock does, the
# way a call reaches the client (inline or on a worker, its hooks, its
# deadline, its retries and resends, a refused or frozen node), and the
# contract suite as a whole.
LATEST_TESTS := TestContract|TestHook.*|TestHooksSeeEveryCommand|TestHandoffHook|TestLiveness.*|TestLifecycleRaces
LATEST_TESTS := $(LATEST_TESTS)|TestAcquireUnreachable.*|TestUnreachableNamed|TestLateCopyOf.*|TestResentReleaseNotLost|TestSetLimitCopies
LATEST_TESTS := $(LATEST_TESTS)|TestScriptsTwiceOnePublication|TestRaiseTwice|TestLateAnswerAfterCallerCancelled|TestLateSetDuringReleaseCleanedUp
LATEST_TESTS := $(LATEST_TESTS)|TestLateRenewalOfLostLockCleanedUp|TestRetriedAcquireEndingInPoolTimeoutCleanedUp|TestTimedOutAcquireLeavesNoKey
LATEST_TESTS := $(LATEST_TESTS)|TestClose.*|TestClosedClientError|TestRedlockM.*Frozen|TestLostBeforeExpiryFrozen|TestSentinel.*|TestClusterSlots|TestTLS.*|TestACL.*

test: redis faketime
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./cmd/...
	GOOS=windows $(GO) build . ./fenced
	@deps=$$($(GO) list -deps ./cmd/dlock) || exit 1; \
	if echo "$$deps" | grep -qxE 'testing|go.uber.org/goleak'; then \
		echo "cmd/dlock links the testing package or goleak"; exit 1; fi
	DLOCK_HISTORY_DURATION=10s $(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -race -count=1 -timeout 20m -parallel 4 -modfile=go.redis-latest.mod \
		-run '^($(LATEST_TESTS))$$' .
	$(GO) test -race -count=1 -modfile=go.redis-latest.mod ./internal/quorum
	$(GO) test -count=1 -run '^TestAllocsPerAcquireRelease$$' .
	$(GO) test -count=1 -modfile=go.redis-latest.mod -run '^TestAllocsPerAcquireRelease$$' .
	cd tools/releasecheck && $(GO) vet ./...
	@echo "tools/testmodules.sh, and tools/testservers.sh beside it"; \
	servers=$$(mktemp); GO=$(GO) ./tools/testservers.sh >"$$servers" 2>&1 & pid=$$!; \
	GO=$(GO) ./tools/testmodules.sh; rc=$$?; \
	wait $$pid; rs=$$?; cat "$$servers"; rm -f "$$servers"; \
	[ $$rc = 0 ] && [ $$rs = 0 ]

# The library alone (the root package, fenced, dlocktest, internal/...),
# vetted and tested under the race detector once, against the go-redis of
# go.mod: a few minutes, for working on the library. make test does it all.
test-lib: redis
	$(GO) vet . ./fenced ./dlocktest ./internal/...
	$(GO) test -race -count=1 . ./fenced ./dlocktest ./internal/...

# The main job: start local redis-servers and show the lock at work. It
# installs redis-server when missing (as root on Debian), and nothing else.
demo: redis
	$(GO) run ./cmd/dlock demo

# Benchmarks against the Go peers (bench/, a module of its own so that the
# library never depends on them): starts its own redis-servers, prints the
# tables and writes docs/benchmarks.md and the SVG charts (about 20 minutes).
# QUICK=1 runs a short version (under a minute) that only checks that it all
# still works; it writes nothing and its numbers mean nothing.
bench: redis
ifdef QUICK
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd bench && $(GO) run ./cmd/dlockbench -quick
else
	cd bench && $(GO) run ./cmd/dlockbench -out ../docs
	$(GO) test -run '^$$' -bench AcquireRelease -benchmem .
endif

# The history checker (TestHistory) for DURATION on each topology (one Redis,
# a 5-node Redlock) instead of make test's 30s: worker processes lock under a
# seeded random schedule of faults; it prints a summary per topology
# (acquisitions, faults by kind, violations: must be 0), also appended to
# soak-summary.txt. SEED=N replays a schedule.
DURATION ?= 10m
soak: redis faketime
	DLOCK_HISTORY_DURATION=$(DURATION) DLOCK_HISTORY_SEED=$(SEED) DLOCK_HISTORY_SUMMARY=$(CURDIR)/soak-summary.txt \
		$(GO) test -count=1 -timeout 0 -run '^TestHistory$$' -v . | grep -E 'history\.go|^(---|ok|FAIL)'
	@cat soak-summary.txt

# The explorer (internal/history/explore.go, docs/reliability.md): every
# public call at random and at once, on Lockers shared by goroutines, under
# command-level faults (replies lost, commands run twice or late, resets, a
# Locker cut off from a master, a slow node) and server faults, checked on
# the recorded history (exclusion, limits, fences, terms, the truth of
# errors, liveness), for DURATION per topology (one Redis, Redlocks of 3
# and 5 masters, a Cluster) and client family (go-redis; go-redis behind
# proxies that reset connections and hold copies back; rueidis and
# valkey-go, in their modules), instead of make test's few seconds. SEED=N
# replays a schedule (the faults' and operations' order and targets; the
# timings vary). One summary line per topology and family (operations,
# faults by kind, violations by check: 0), also in verify-summary.txt;
# VERIFY_LOG=FILE keeps every violation with its history, and
# VERIFY_MONITOR=1 adds to each history what the servers ran (MONITOR).
verify: redis
	@rm -f verify-summary.txt; rc=0; \
	export DLOCK_EXPLORE_DURATION=$(DURATION) DLOCK_EXPLORE_SEED=$(SEED) DLOCK_EXPLORE_SUMMARY=$(CURDIR)/verify-summary.txt \
		DLOCK_EXPLORE_LOG=$(if $(VERIFY_LOG),$(abspath $(VERIFY_LOG))) DLOCK_EXPLORE_MONITOR=$(VERIFY_MONITOR); \
	$(GO) test -count=1 -timeout 0 -run '^TestExplore$$' ./internal/history >verify.log 2>&1 || rc=1; \
	for m in extra/dlockrueidis extra/dlockvalkey; do \
		(cd $$m && $(GO) test -count=1 -timeout 0 -run '^TestExplore$$' .) >>verify.log 2>&1 || rc=1; \
	done; \
	cat verify-summary.txt; exit $$rc

# The reliability suite (docs/reliability.md, Faults): the long forms of the
# fault tests that make test runs short. RUNS times each (default 10): the
# clock faults (redis-server under libfaketime, which must be installed:
# Debian's libfaketime), the servers that lack a command (EVALSHA, WAIT,
# SPUBLISH; a one-shard Cluster), the server frozen and restarted under
# load, and the linearizability checker's self-tests; then, for
# RELIABILITY_DURATION each (default 2m), the checker's run under faults
# (fenced.Store histories checked with porcupine), a live slot migration
# under load, and the history checker (TestHistory, as make soak); and
# FAILOVER_RUNS times (default 2) each of the eight failovers under load
# (a Sentinel's or a Cluster's master killed, with and without
# WithReplicaAck, the replication link cut first or not: 10-36s each). The
# full log is in reliability.log. CI runs it with a cap on
# RELIABILITY_DURATION.
RUNS ?= 10
RELIABILITY_DURATION ?= 2m
FAILOVER_RUNS ?= 2
reliability: redis faketime
	@DLOCK_RELIABILITY=1 $(GO) test -race -count=$(RUNS) -timeout 0 -v \
		-run '^(TestClockForwardJump|TestClockBackwardJump|TestMissingScripting|TestMissingWait|TestClusterWithoutSpublish|TestOneShardCluster|TestLinearizableSelfTest|TestLinearizableLock|TestServerFrozenUnderLoad|TestServerRestartedUnderLoad)$$' . \
		>reliability.log 2>&1; rc=$$?; \
	grep -E '^(--- FAIL|ok|FAIL)|_test.go' reliability.log; \
	echo "passed: $$(grep -c '^--- PASS' reliability.log), failed: $$(grep -c -- '--- FAIL' reliability.log)"; \
	[ $$rc -eq 0 ] || exit $$rc; \
	echo "== long runs" >>reliability.log; \
	DLOCK_RELIABILITY=1 DLOCK_LIN_DURATION=$(RELIABILITY_DURATION) DLOCK_HISTORY_DURATION=$(RELIABILITY_DURATION) \
		DLOCK_MIGRATION_DURATION=$(RELIABILITY_DURATION) \
		DLOCK_FAILOVER_RUNS=$(FAILOVER_RUNS) \
		$(GO) test -race -count=1 -timeout 0 -v -run '^(TestLinearizableFaults|TestSlotMigrationUnderLoad|TestHistory|TestFailoverUnderLoad)$$' . >>reliability.log 2>&1; rc=$$?; \
	sed -n '/^== long runs/,$$p' reliability.log | grep -E '^(--- |ok|FAIL)|(linearizability|migration|failover_load)_test.go|history\.go'; exit $$rc

# Each fuzz target for FUZZTIME (default 100000x: a count of executions,
# some seconds each): the reply parsers, key names and options, and the
# CLI's URL parsing. Inputs that fail are written to testdata/fuzz and then
# run by make test as part of the seed corpus. A count, not a duration: with
# a duration, Go 1.26's fuzz coordinator can report "context deadline
# exceeded" at its end without any failing input (golang/go#75804, fixed in
# Go 1.27).
FUZZTIME ?= 100000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseAcquire$$' -fuzztime $(FUZZTIME) ./internal/script
	@for t in FuzzNames FuzzOptions; do \
		$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) . || exit 1; \
	done
	$(GO) test -run '^$$' -fuzz '^FuzzRedisURL$$' -fuzztime $(FUZZTIME) ./cmd/dlock

# The version of a release: the newest one in CHANGELOG.md unless given.
VERSION ?= $(shell sed -n 's/^## \(v[0-9][0-9.]*\)$$/\1/p' CHANGELOG.md | head -1)

# Checks that the modules install as published at VERSION (see
# CONTRIBUTING.md, Releasing): in a scratch clone of HEAD, tags the root and
# every extra, serves them from a local module proxy, and installs the CLI
# and gets every module in fresh modules, in an empty GOPATH. Commit first:
# it clones HEAD.
release-check:
	cd tools/releasecheck && $(GO) run . -version $(VERSION) -repo $(CURDIR)

# Makes every extra require the core at VERSION (the first step of a
# release; commit the result).
release-prepare:
	@for m in extra/*/go.mod; do \
		(cd $$(dirname $$m) && $(GO) mod edit -require=github.com/dlock-dev/dlock@$(VERSION)) || exit 1; \
	done

# redis-server, from Debian's package when missing (as root): nothing else.
redis:
	@./scripts/dev/ensure-redis.sh

# Debian's libfaketime (package faketime), for the fault tests of a server's
# clock, when missing (as root): make test, soak and reliability.
faketime:
	@./scripts/dev/ensure-faketime.sh
