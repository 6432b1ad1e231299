# Terrarium. `make image` and `make test` do all the set-up they need.
SHELL := /bin/bash
GO ?= go
BIN := bin
OUT ?= out
SPEC ?= os/terrarium.yaml
# The tests' image: the default image plus the test applications' bundle.
TEST_SPEC := qemu-tests/testdata/terrarium-test.yaml
TEST_OUT := $(OUT)/test
# QEMU cases booted at once: a TCG boot keeps about one host core busy, so
# two fill a 2-core host (docs/operations/qemu-ci.md).
QEMU_PARALLEL ?= 2
export TERRARIUM_CACHE ?= $(HOME)/.cache/terrarium
GOFLAGS_BUILD := -trimpath -ldflags=-buildid=

.PHONY: all deps lint-tool bin image test-image pin pin-previous test unit qemu-test e2e e2e-node e2e-backup e2e-powercut e2e-change-powercut e2e-upgrade e2e-ha vet fuzz bench bench-cluster bench-upgrade bench-idle bench-audit bench-pagein bench-firmware clean

all: image

deps:
	@bash scripts/deps.sh

# golangci-lint at exactly this version (.golangci.yml is its config), built
# into $(BIN) by go install, which checks the module against the checksum
# database; skipped when $(BIN) already holds this version.
GOLANGCI_LINT_VERSION := 2.15.0
GOLANGCI_LINT := $(abspath $(BIN))/golangci-lint
lint-tool:
	@if [ "$$($(GOLANGCI_LINT) version --short 2>/dev/null)" != "$(GOLANGCI_LINT_VERSION)" ]; then \
		echo "lint-tool: installing golangci-lint v$(GOLANGCI_LINT_VERSION) into $(BIN) (a few minutes)"; \
		GOBIN=$(abspath $(BIN)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(GOLANGCI_LINT_VERSION); \
	fi

bin:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_BUILD) -o $(BIN)/imagebuild ./cmd/imagebuild
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/firstboot ./cmd/firstboot
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/terrarium-init ./cmd/terrarium-init

image: deps bin
	$(BIN)/imagebuild build --spec $(SPEC) --out $(OUT)

# The e2e backup scenario runs a test application: it boots this image.
test-image: deps bin
	$(BIN)/imagebuild build --spec $(TEST_SPEC) --out $(TEST_OUT)

# After changing components/versions.yaml: align the components' go.mod
# files, rebuild the Kubernetes bundle's images and pin their digests.
pin: deps bin
	$(BIN)/imagebuild components pin
	$(BIN)/imagebuild os lock --spec os/terrarium.yaml

# The Kubernetes release before the default, for make e2e-upgrade.
pin-previous: deps bin
	$(BIN)/imagebuild components pin --components components/previous

vet: bin lint-tool
	@test -z "$$(gofmt -l cmd pkg qemu-tests components)" || { gofmt -l cmd pkg qemu-tests components; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./qemu-tests/...
	cd components/cni-plugins && GOWORK=off $(GO) vet ./flannel
	cd components/pause && GOWORK=off $(GO) vet .
	cd components/local-path-provisioner && GOWORK=off $(GO) vet ./volume
	cd components/metallb && GOWORK=off $(GO) vet ./link ./crds
	$(GOLANGCI_LINT) run ./...
	cd components/cni-plugins && GOWORK=off $(GOLANGCI_LINT) run ./flannel
	cd components/pause && GOWORK=off $(GOLANGCI_LINT) run .
	cd components/local-path-provisioner && GOWORK=off $(GOLANGCI_LINT) run ./volume
	cd components/metallb && GOWORK=off $(GOLANGCI_LINT) run ./link ./crds
	$(BIN)/imagebuild components check

# -trimpath keys the build cache by import path, not by directory: a fresh
# clone in a new place reuses what an earlier clone compiled.
GOFLAGS_TEST := -trimpath -race -count=1
unit: bin
	$(GO) test $(GOFLAGS_TEST) ./cmd/... ./pkg/...
	cd components/cni-plugins && GOWORK=off $(GO) test $(GOFLAGS_TEST) ./flannel
	cd components/local-path-provisioner && GOWORK=off $(GO) test $(GOFLAGS_TEST) ./volume
	cd components/metallb && GOWORK=off $(GO) test $(GOFLAGS_TEST) ./link ./crds

qemu-test: image
	@df -h /tmp $(TERRARIUM_CACHE) | sed 's/^/qemu-test: disk: /' # a full disk fails a build in its own words; say how full it was
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		TERRARIUM_ISO=$(abspath $(OUT))/terrarium.iso TERRARIUM_OVA=$(abspath $(OUT))/terrarium.ova \
		$(GO) test -count=1 -timeout 80m -parallel $(QEMU_PARALLEL) -v ./qemu-tests/...

test: deps bin vet unit qemu-test

# Every Go fuzz target (go test -list '^Fuzz' ./pkg/... and the components' own programs) for FUZZTIME each,
# one after another; not part of `make test`. A failing input is written to
# the package's testdata/fuzz/ and becomes a regression test
# (docs/fuzzing.md). `make fuzz FUZZTIME=30s` for a quick pass;
# FUZZ_MATCH='machineconfig|volume' for some targets.
FUZZTIME ?= 10m
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZ_MATCH='$(FUZZ_MATCH)' bash scripts/fuzz.sh

# End-to-end cluster formation in QEMU (two VMs, a power cut, a Service
# across nodes; then an init node whose RTC reads 1970): too long for CI
# under TCG, so not part of `make test`.
e2e: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 130m -v -run 'TestClusterFormation|TestFlatBatteryInitNode|TestVolumeDiskInitNode' ./qemu-tests/...

# One-machine scenarios too long for make test: slot fallback, upgrades
# from a stick (and between Secure Boot builds), the ISO's installer (and
# a Secure Boot build's), the bundle rebuilt from empty caches.
e2e-node: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		TERRARIUM_ISO=$(abspath $(OUT))/terrarium.iso \
		$(GO) test -tags e2e -count=1 -timeout 90m -v -run 'TestFallbackToSlotA$$|TestUpgradeFromStick$$|TestSecureBootUpgrade$$|TestSecureBootReproducible$$|TestConfigChannelsMore$$|TestISOInstall$$|TestISOInstallBIOS$$|TestSecureBootISOInstall$$|TestKubernetesBundleFromCleanCache$$' ./qemu-tests/...

# A one-node cluster formed on a machine without a TPM and on one with a
# TPM: the sealed disk holds no private key in the clear; the time to
# healthy and STATE's throughput of both.
e2e-sealed: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 90m -v -run 'TestSealedClusterDisk$$' ./qemu-tests/...

# Disaster recovery: a cluster backs up to a TERRA-BACKUP stick, every VM
# is destroyed, a new control plane restores from the stick.
e2e-backup: test-image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_TEST_IMAGE=$(abspath $(TEST_OUT))/terrarium-test.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 100m -v -run 'TestClusterBackupRestore' ./qemu-tests/...

# Power cuts of an init node at 20 random moments of its formation, each
# followed by power-on: it must form every time. Hours under TCG.
# TERRARIUM_POWERCUT_SEED=N repeats a run's moments.
e2e-powercut: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 330m -v -run 'TestPowerCuts' ./qemu-tests/...

# The power cut the moment a standalone node accepts a signed config
# change, then power-on without and with the stick: one VM, a few minutes.
e2e-change-powercut: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 40m -v -run 'TestPowerCutDuringSignedChange$$' ./qemu-tests/...

# One stick upgrades a two-node cluster formed on the previous Kubernetes
# (components/previous): a faulty build rolls back, the good one goes
# through node by node. It builds its three images itself.
e2e-upgrade: deps bin
	TERRARIUM_BIN=$(abspath $(BIN)) $(GO) test -tags e2e -count=1 -timeout 200m -v -run 'TestClusterUpgrade$$' ./qemu-tests/...

# Three control planes and a worker (four VMs): longer still.
e2e-ha: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 130m -v -run 'TestClusterHA' ./qemu-tests/...

bench-cluster: image
	bash scripts/bench-cluster.sh

# A two-node cluster's upgrade: one stick against the same upgrade by hand
# with kubeadm, on the same cluster (about 80 minutes a run; BENCH_RUNS,
# BENCH_KEEP=1 to add runs to the last ones). It builds its two images.
bench-upgrade: deps bin
	bash scripts/bench-upgrade.sh

# What a formed, idle control plane costs the host under TCG (one VM).
bench-idle: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 90m -v -run 'TestControlPlaneIdleCPU' ./qemu-tests/...

# How fast an idle control plane's audit log grows (one VM, ten minutes).
bench-audit: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 45m -v -run 'TestControlPlaneIdleAudit$$' ./qemu-tests/...

# What paging in the node's programs costs under TCG with the slots'
# compressor (lz4) against zstd: one VM, both squashfs attached.
bench-pagein: image
	TERRARIUM_BIN=$(abspath $(BIN)) TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -tags e2e -count=1 -timeout 40m -v -run 'TestSlotPageIn$$' ./qemu-tests/...

# The same image booted to provisioned under OVMF and under SeaBIOS
# (GRUB), in turn: medians of three boots each.
bench-firmware: image
	TERRARIUM_IMAGE=$(abspath $(OUT))/terrarium.qcow2 \
		$(GO) test -run '^$$' -bench 'FirmwareBoot$$' -benchtime=3x -timeout 60m -v ./qemu-tests/

bench: image
	bash scripts/bench.sh
	bash scripts/bench-registry.sh

clean:
	rm -rf $(BIN) $(OUT)
