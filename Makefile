# canopy's entry points. The README documents `make run` and `make test`;
# everything else is for people working on canopy.

GO        ?= go
FUZZTIME  ?= 60s
BENCHTIME ?= 1s
BIN       := bin

.PHONY: all build run test tools vet staticcheck fmt-check unit priority norace fuzz bench microbench examples clean

# Tools the tests need beyond Go's module cache land in bin/tools (helm),
# tools/kafka/lib (Apache Kafka's jars, from Maven Central) or come from
# Debian (kcat, python3-venv, prometheus, a JDK, Maven), tools/python/venv
# (PyPI, pinned by tools/python/requirements.txt): see
# tools/install.sh.
export PATH := $(CURDIR)/$(BIN)/tools:$(PATH)

all: build

# -buildvcs=auto: the binaries carry the commit they were built from
# (`projector version`, canopy_build_info) even where the Go environment
# sets GOFLAGS=-buildvcs=false, as on canopy's build machines.
build:
	$(GO) build -buildvcs=auto -o $(BIN)/ ./cmd/...

# run brings everything up on this machine: an embedded Kafka (kfake) on
# loopback, canopy's topics, the projector, and a demo workload of agent
# trees with a human typing into them; every wake is printed as it is
# published (WAKE! marks the priority lane). Ctrl-C stops it.
run: build
	$(BIN)/canopy-dev $(RUNFLAGS)

# test is what CI runs (.ci/run): formatting, vet, staticcheck, and every
# test with the race detector, the checked-in fuzz corpora included; the broker-matrix
# tests run against kfake and against Apache Kafka, which they start
# themselves (CANOPY_TEST_BROKERS=kfake or kafka narrows it). tools installs
# what the interop, dashboard, chart and Apache Kafka tests need, if it is
# missing.
test: tools fmt-check vet staticcheck unit priority norace

tools:
	./tools/install.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The faults tag builds in the projector's fault injection (internal/projector
# faults.go), which the tests of poison records use: vetted, checked and
# tested with it too.
vet:
	$(GO) vet ./...
	$(GO) vet -tags faults ./internal/projector

# staticcheck is a tool dependency of the module (go.mod's tool line), so
# its version is pinned with the code's and `go tool` builds it.
staticcheck:
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags faults ./internal/projector

unit:
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -race -count=1 -tags faults -run '^TestPoisonRecordInjected$$' ./internal/projector

# priority runs the priority-lane test once more without the race detector,
# where it queues the full 100,000-event backlog (25,000 under -race, which
# slows Pebble tenfold).
priority:
	$(GO) test -count=1 -run '^TestPriorityLaneOvertakesBacklog$$' ./internal/projector

# norace runs the tests that count allocations once more without the race
# detector, whose runtime allocates for its own bookkeeping (under -race
# they check all but the count).
norace:
	$(GO) test -count=1 -run '^(TestSnapshotEventsShareTheirAttributes|TestKafkaBatchMetrics)$$' ./pkg/telemetry
	$(GO) test -count=1 -run '^TestDecodeRecordIntoAllocatesNoEvent$$' ./pkg/topics

# fuzz runs each fuzz target for FUZZTIME; new interesting inputs land in the
# Go cache (copy them to testdata/fuzz/ to keep them).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeDifferential$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeText$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzValidJSON$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzIsRFC3339$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzParseUTC$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzAppendJSON$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME) ./pkg/snapshot
	$(GO) test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZTIME) ./pkg/redact
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./pkg/projection
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeInput$$' -fuzztime $(FUZZTIME) ./internal/gateway
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) ./internal/gateway
	$(GO) test -run '^$$' -fuzz '^FuzzVerifyJWT$$' -fuzztime $(FUZZTIME) ./internal/gateway

# bench runs the load harness's standard scenarios (bench/harness: max,
# steady, grow, priority, scale, failover) against an embedded broker, with
# the projectors as processes of bin/projector, and rewrites the harness's
# section of bench/RESULTS.md and bench/results.json. Against Apache Kafka,
# started by the harness: make bench BENCHFLAGS="-kafka real" (its own
# section and bench/results-kafka.json). One scenario, or another Kafka:
# make bench BENCHFLAGS="-scenario steady -brokers host:9092".
bench: build
	$(GO) run ./bench -results bench/RESULTS.md $(BENCHFLAGS)

# microbench runs the Go micro-benchmarks behind bench/RESULTS.md's
# hand-written sections.
microbench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./pkg/projection ./pkg/snapshot

# examples regenerates the generated example event files.
examples:
	$(GO) test ./examples -run Generated -update

clean:
	rm -rf $(BIN)
