# Spool build entry points. `make test` is what CI runs (see .ci/run).
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools
BIN := $(TOOLS)/bin
export PATH := $(BIN):$(PATH)

PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
# The generator of the fast marshal/unmarshal methods (*_vtproto.pb.go) that
# proto/grpcbuf's codec uses. The same version as the vtprotobuf module in
# proto/go.mod (grpc requires this commit after v0.6.0; v0.6.0's generator drops a
# oneof's empty message where protobuf-go writes it).
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.1-0.20240319094008-0393e58bdf10
BUF_VERSION := 1.75.0
STATICCHECK_VERSION := v0.8.2

GO_TEST_FLAGS ?= -race -count=1 -timeout=15m

# The release this tree is (the VERSION file, which internal/buildinfo embeds)
# and the commit it is built from, linked into every binary built here
# (spoold version, spool version, spool_build_info). A tree with uncommitted
# changes gets "-dirty" after the commit. docs/operations.md, "Releases".
VERSION := $(shell cat VERSION)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)
GO_LDFLAGS := -X github.com/spoolmq/spool/internal/buildinfo.commit=$(COMMIT)

# The Go modules built, vetted and linted here: the server (.), the generated
# API and its codec (proto), the Go SDK (sdk/go). deploy/check is tested by
# `make test` on its own. docs/architecture.md, "Modules", says why three.
GO_MODULES := . proto sdk/go

# Every proto package whose Go code is generated and committed.
PROTO_GEN_DIRS := proto/spool/v1 proto/spool/cluster/v1

.PHONY: all build test test-go lint gen bench fuzz demo tools deps clean

all: build

build:
	@for m in $(GO_MODULES); do echo "go build ($$m)"; (cd $$m && $(GO) build -ldflags '$(GO_LDFLAGS)' ./...) || exit 1; done

## bin: spoold, spool and spool-injector for this machine, in bin/, with the version and commit linked in.
.PHONY: bin
bin:
	$(GO) build -ldflags '$(GO_LDFLAGS)' -o bin/ ./cmd/spoold ./cmd/spool ./cmd/spool-injector

## tools: pinned code generators and buf, installed under .tools/ (not on the system).
tools: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-go-vtproto $(BIN)/buf

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

$(BIN)/protoc-gen-go-vtproto:
	GOBIN=$(BIN) $(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_GO_VTPROTO_VERSION)

$(BIN)/buf:
	mkdir -p $(TOOLS)/npm $(BIN)
	npm install --silent --no-audit --no-fund --prefix $(TOOLS)/npm @bufbuild/buf@$(BUF_VERSION)
	ln -sf $(TOOLS)/npm/node_modules/.bin/buf $(BIN)/buf

## gen: regenerate the committed Go code from proto/.
gen: tools
	rm -f $(addsuffix /*.pb.go,$(PROTO_GEN_DIRS))
	buf generate

## deps: what the tests need on a fresh machine (redis-server from Debian's packages).
deps:
	@./scripts/ensure-deps.sh

## test: every test, Go with -race (the server's module, then the generated API's), then the fuzz
## targets of the decoders of peer input for PEER_FUZZTIME (2s) each, then deploy/'s checks (a
## module of its own: Helm, Prometheus and Kubernetes types stay out of the main module), then
## each SDK's (the Go SDK's module in test-sdk-go). Installs what a fresh machine lacks.
test: deps build
	$(GO) test $(GO_TEST_FLAGS) ./...
	cd proto && $(GO) test $(GO_TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory fuzz-peers
	cd deploy/check && $(GO) test -count=1 -timeout=10m ./...
	@$(MAKE) --no-print-directory test-sdks

## fuzz-peers: the fuzz targets of every decoder of what a peer sends (transport frames, Hello,
## snapshot headers, raft messages into a follower's and a leader's Host, controller and
## coordinator commands and states), PEER_FUZZTIME each: about 35 s once built (docs/security.md, "Peers").
PEER_FUZZTIME ?= 2s
PEER_FUZZ := ^(FuzzDecodeFrame|FuzzHello|FuzzSnapshotHeader|FuzzHostStep|FuzzHostStepLeader|FuzzDecodeCommand|FuzzDecodeState)$$
.PHONY: fuzz-peers
fuzz-peers:
	@FUZZTIME=$(PEER_FUZZTIME) FUZZMINIMIZETIME=1s FUZZ='$(PEER_FUZZ)' GO=$(GO) ./scripts/fuzz.sh

# Each SDK has sdk/<lang>/sdk.mk: it defines a
# test-sdk-<lang> target (installing its toolchain's packages under the build
# tree) and adds it to SDK_TESTS.
SDK_TESTS :=
-include sdk/*/sdk.mk

## test-sdks: the tests of every SDK, each installed from its artifact into a scratch project too.
.PHONY: test-sdks
test-sdks: $(SDK_TESTS)

## lint: gofmt, go vet, staticcheck, buf lint, buf breaking, stale generated code, banned patterns, functions over 120 lines.
lint: tools
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@for m in $(GO_MODULES); do echo "go vet, staticcheck ($$m)"; \
	  (cd $$m && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...) || exit 1; done
	buf lint
	@./scripts/buf-breaking.sh
	@tmp=$$(mktemp -d); cp -r proto $$tmp/; \
	  rm -f $(addsuffix /*.pb.go,$(PROTO_GEN_DIRS)); buf generate; \
	  if ! diff -r $$tmp/proto proto >/dev/null; then echo "generated code is stale: run 'make gen' and commit"; diff -r $$tmp/proto proto | head -20; rm -rf $$tmp; exit 1; fi; \
	  rm -rf $$tmp
	@./scripts/banned.sh

## bench: the Go benchmarks (figures go to docs/benchmarks.md).
bench:
	@for m in $(GO_MODULES); do (cd $$m && $(GO) test -run='^$$' -bench=. -benchmem ./...) || exit 1; done

## fuzz: every Go fuzz target, one after another, each for FUZZTIME (default 30s) with one
## worker; FUZZ=regexp narrows it to some targets. A crasher lands in the target's testdata/fuzz:
## commit it with the fix. (The seed corpora run in `make test` already.)
FUZZTIME ?= 30s
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

## demo: a checkout producer and a flaky email worker on one in-process sidecar.
demo:
	$(GO) run ./cmd/spool demo

clean:
	rm -rf $(TOOLS) bin dist

## chaos: the fault suite over real spoold processes in network namespaces (root, iproute2;
## nftables for the oneway, flaky and bridge kinds; chaos/chaos_test.go): CHAOS_RUNS seeded runs (default 50) of
## each fault kind, CHAOS_SECONDS of faults each (default 20); histories, logs and report.md in
## CHAOS_OUT (default chaos-out/). Replay one run: SPOOL_CHAOS_FAULTS=<kind> SPOOL_CHAOS_SEED=<seed>.
## `make test` runs the short form: one 10 s run of kill -9s and TestPublishAfterOneWayHeal.
CHAOS_RUNS ?= 50
CHAOS_SECONDS ?= 20
CHAOS_FAULTS ?= kill,pause,isolate,oneway,redis,majority,diskfull,corrupt,powerloss,clock,flaky,bridge,slowdisk,membership
CHAOS_OUT ?= $(CURDIR)/chaos-out
.PHONY: chaos
chaos:
	@mkdir -p $(CHAOS_OUT)
	SPOOL_CHAOS_RUNS=$(CHAOS_RUNS) SPOOL_CHAOS_SECONDS=$(CHAOS_SECONDS) SPOOL_CHAOS_FAULTS=$(CHAOS_FAULTS) SPOOL_CHAOS_OUT=$(CHAOS_OUT) \
	  $(GO) test -count=1 -timeout=0 -run TestChaos -v ./chaos/

## upgrade-test: rolling upgrades under load from the previous release (the last line of RELEASES,
## built from the repository's history) to this tree, and rollbacks before finalization, over the
## fault suite's cluster, workload and checker (chaos/upgrade_test.go; root, iproute2):
## UPGRADE_RUNS seeded runs (default 10) of each. Then the previous release's SDKs, all four, each
## built in that release's tree by its own Makefile, through the conformance matrix against this
## spoold, and this tree's four SDKs against the previous spoold (sdk/conformance/README.md,
## "Across releases"; about 6 minutes). `make test` runs one upgrade and one rollback run
## (TestRollingUpgrade) and the previous Go SDK's conformance.
UPGRADE_RUNS ?= 10
.PHONY: upgrade-test
upgrade-test: build-sdk-python build-sdk-typescript build-sdk-java
	@mkdir -p $(CHAOS_OUT)
	SPOOL_CHAOS_RUNS=$(UPGRADE_RUNS) SPOOL_CHAOS_SECONDS=$(CHAOS_SECONDS) SPOOL_CHAOS_FAULTS=upgrade,rollback SPOOL_CHAOS_OUT=$(CHAOS_OUT) \
	  $(GO) test -count=1 -timeout=0 -run TestChaos -v ./chaos/
	SPOOL_CONFORMANCE_LANGS=go-previous,python-previous,typescript-previous,java-previous $(GO) test -count=1 -timeout=20m ./sdk/conformance/
	SPOOL_CONFORMANCE_SPOOLD=previous SPOOL_CONFORMANCE_LANGS=$(CONFORMANCE_LANGS) $(GO) test -count=1 -timeout=15m ./sdk/conformance/

## release: the artifacts of release $(VERSION) in dist/$(VERSION)/ (docs/operations.md, "Releases"):
## spoold, spool and spool-injector for linux/amd64 and linux/arm64 (static, -trimpath, version and
## commit linked in), a CycloneDX SBOM of each, the Python wheel and sdist, the TypeScript tarball,
## the Java jar and pom, the container images when a docker daemon answers, and SHA256SUMS.
## Refuses a tree with uncommitted changes, SDK metadata whose version is not VERSION and a
## CHANGELOG without the release's entry (scripts/release-check.sh); RELEASE_TRY=1 builds an
## untagged or changed tree anyway, for a try (not to publish). Not part of `make test`
## (TestReleaseDryRun checks `make -n release` and the linked version there).
DIST := dist/$(VERSION)
RELEASE_ARCHES := amd64 arm64
RELEASE_CMDS := spoold spool spool-injector
RELEASE_LDFLAGS := -s -w $(GO_LDFLAGS)
RELEASE_BINS := $(foreach a,$(RELEASE_ARCHES),$(foreach c,$(RELEASE_CMDS),$(DIST)/$(c)-$(VERSION)-linux-$(a)))
# CycloneDX's own Go-module SBOM generator (OWASP CycloneDX, maintained, a
# Go module the proxy serves, so `go run` needs no other installer): its `bin`
# mode reads the module list the Go linker put in each binary, which is
# exactly what ships, per platform. Pinned like the other tools.
CYCLONEDX_GOMOD_VERSION := v1.10.0
CYCLONEDX_GOMOD := $(GO) run github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION)
# python -m build, pinned, in a venv of its own under .tools/.
PY_BUILD_VERSION := 1.3.0
RELEASE_PY := $(TOOLS)/release-py
PYTHON ?= python3
MVN ?= mvn
# The images: ghcr.io/spoolmq/spoold and spool-injector, for RELEASE_ARCHES, as OCI archives.
IMAGE_REPO ?= ghcr.io/spoolmq
IMAGE_PLATFORMS := linux/amd64,linux/arm64

.PHONY: release release-check release-bins release-sdks release-image release-sums
release: release-check release-bins release-sdks release-image release-sums
	@echo "release $(VERSION) ($(COMMIT)) in $(DIST)/"

release-check:
	@case "$(COMMIT)" in *-dirty) [ -n "$(RELEASE_TRY)" ] || { echo "release: the tree has uncommitted changes (commit $(COMMIT)): commit them, or RELEASE_TRY=1 for a try"; exit 1; };; esac
	@RELEASE_TRY=$(RELEASE_TRY) ./scripts/release-check.sh $(VERSION)
	rm -rf $(DIST) && mkdir -p $(DIST)

release-bins: $(RELEASE_BINS)

# One rule per platform and command: dist/V/spoold-V-linux-amd64 and its SBOM.
define release_bin
$(DIST)/$(2)-$(VERSION)-linux-$(1): release-check
	CGO_ENABLED=0 GOOS=linux GOARCH=$(1) $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o $$@ ./cmd/$(2)
	$(CYCLONEDX_GOMOD) bin -json -version $(VERSION) -output $$@.cdx.json $$@
endef
$(foreach a,$(RELEASE_ARCHES),$(foreach c,$(RELEASE_CMDS),$(eval $(call release_bin,$(a),$(c)))))

release-sdks: release-check
	@test -x $(RELEASE_PY)/bin/python || $(PYTHON) -m venv $(RELEASE_PY)
	$(RELEASE_PY)/bin/python -m pip install -q --disable-pip-version-check build==$(PY_BUILD_VERSION)
	$(RELEASE_PY)/bin/python -m build --outdir $(DIST) sdk/python
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm pack --pack-destination $(CURDIR)/$(DIST)
	$(MVN) -B -ntp -q -f sdk/java/pom.xml -DskipTests package
	cp sdk/java/target/spool-$(VERSION).jar $(DIST)/spool-java-$(VERSION).jar
	cp sdk/java/pom.xml $(DIST)/spool-java-$(VERSION).pom

# The images need a docker daemon with buildx; without one the command is
# printed and skipped (docs/operations.md, "Releases", has it too).
IMAGE_BUILD = docker buildx build --platform $(IMAGE_PLATFORMS) -f deploy/Dockerfile --build-arg COMMIT=$(COMMIT)
release-image: release-check
	@if docker info >/dev/null 2>&1; then \
	  set -x; \
	  $(IMAGE_BUILD) --target spoold -t $(IMAGE_REPO)/spoold:$(VERSION) --output type=oci,dest=$(DIST)/spoold-image-$(VERSION).oci.tar . && \
	  $(IMAGE_BUILD) --target spool-injector -t $(IMAGE_REPO)/spool-injector:$(VERSION) --output type=oci,dest=$(DIST)/spool-injector-image-$(VERSION).oci.tar . ; \
	else \
	  echo "release: no container images: no docker daemon answers here (docker info). Where one does:"; \
	  echo "  $(IMAGE_BUILD) --target spoold -t $(IMAGE_REPO)/spoold:$(VERSION) --output type=oci,dest=$(DIST)/spoold-image-$(VERSION).oci.tar ."; \
	  echo "  $(IMAGE_BUILD) --target spool-injector -t $(IMAGE_REPO)/spool-injector:$(VERSION) --output type=oci,dest=$(DIST)/spool-injector-image-$(VERSION).oci.tar ."; \
	fi

release-sums: release-bins release-sdks release-image
	cd $(DIST) && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS
