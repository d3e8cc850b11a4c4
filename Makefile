# canopy's entry points. The README documents `make run` and `make test`;
# everything else is for people working on canopy.

GO        ?= go
FUZZTIME  ?= 60s
BENCHTIME ?= 1s
BIN       := bin

.PHONY: all build run test check vet fmt-check unit fuzz bench examples clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# run shows wakes flowing: the example run projected by the projector's
# replay mode, one line per wake (human input wakes are marked WAKE!).
run: build
	@echo "== replaying examples/small-run.jsonl through the projection =="
	$(BIN)/projector replay -format summary < examples/small-run.jsonl
	@echo
	@echo "== the same wakes as published (JSON), first one =="
	@$(BIN)/projector replay < examples/small-run.jsonl 2>/dev/null | head -n 1

# test is what CI runs (.ci/run): formatting, vet, and every test with the
# race detector, the checked-in fuzz corpora included.
test: fmt-check vet unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# fuzz runs each fuzz target for FUZZTIME; new interesting inputs land in the
# Go cache (copy them to testdata/fuzz/ to keep them).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME) ./pkg/topics
	$(GO) test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME) ./pkg/snapshot
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./pkg/projection

# bench runs the micro-benchmarks behind bench/RESULTS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./pkg/projection ./pkg/snapshot

# examples regenerates the generated example event files.
examples:
	$(GO) test ./examples -run Generated -update

clean:
	rm -rf $(BIN)
