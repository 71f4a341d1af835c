# SDK conformance suite (sdk/conformance): included by the top Makefile.
# One list of scenarios (docs/sdks.md), run by every SDK's conformance app
# (sdk/conformance/apps/<lang>) against a spoold built from this repository
# and a real redis-server. It needs every SDK built (Python's venv, the
# TypeScript SDK's dist/, the Java SDK's classes and classpath) and every
# toolchain: a missing one fails the target, saying which. For a local run
# of some languages: SPOOL_CONFORMANCE_LANGS=go,python go test ./sdk/conformance/
CONFORMANCE_LANGS ?= go,python,typescript,java

#
# Across releases (docs/upgrading.md): the previous release's Go SDK
# (go-previous, built from the commit RELEASES names) against this spoold.
# Every SDK of this tree against the previous release's spoold
# (SPOOL_CONFORMANCE_SPOOLD=previous, about 95 s) runs in `make
# upgrade-test`, one matrix after the other: the reconnect cell's bound
# (1 s) is about the SDK, not about a machine running two matrices at once.
.PHONY: test-sdk-conformance
test-sdk-conformance: deps build-sdk-python build-sdk-typescript build-sdk-java
	SPOOL_CONFORMANCE_LANGS=$(CONFORMANCE_LANGS),go-previous $(GO) test -count=1 -timeout=15m ./sdk/conformance/

SDK_TESTS += test-sdk-conformance
