# Go SDK (sdk/go, the module github.com/spoolmq/spool/sdk/go): included by the
# top Makefile. The SDK is a module of its own (docs/sdk-go.md, "Install"), so
# the root's `go test ./...` does not reach it: this target runs its tests,
# then sdk/installtest's TestGoInstall, which builds an app outside the
# repository against the SDK and runs it with a real spoold and redis-server.
SDK_GO := $(CURDIR)/sdk/go

.PHONY: test-sdk-go
test-sdk-go: deps
	cd $(SDK_GO) && $(GO) test $(GO_TEST_FLAGS) ./...
	SPOOL_INSTALL_LANGS=go $(GO) test -count=1 -timeout=5m -run 'TestGoInstall' -v ./sdk/installtest/

SDK_TESTS += test-sdk-go
