# Terrarium. `make image` and `make test` do all the set-up they need.
SHELL := /bin/bash
GO ?= go
BIN := bin
OUT ?= out
SPEC ?= os/terrarium.yaml
export TERRARIUM_CACHE ?= $(HOME)/.cache/terrarium
GOFLAGS_BUILD := -trimpath -ldflags=-buildid=

.PHONY: all deps bin image test unit qemu-test vet bench clean

all: image

deps:
	@bash scripts/deps.sh

bin:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_BUILD) -o $(BIN)/imagebuild ./cmd/imagebuild
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/firstboot ./cmd/firstboot
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/terrarium-init ./cmd/terrarium-init

image: deps bin
	$(BIN)/imagebuild build --spec $(SPEC) --out $(OUT)

vet:
	@test -z "$$(gofmt -l cmd pkg qemu-tests)" || { gofmt -l cmd pkg qemu-tests; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

unit: bin
	$(GO) test -count=1 ./cmd/... ./pkg/...

qemu-test: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -count=1 -timeout 80m -v ./qemu-tests/...

test: deps vet unit qemu-test

bench: image
	bash scripts/bench.sh
	bash scripts/bench-registry.sh

clean:
	rm -rf $(BIN) $(OUT)
