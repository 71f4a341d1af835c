# SDK conformance suite (sdk/conformance): included by the top Makefile.
# One list of scenarios (docs/sdks.md), run by every SDK's conformance app
# (sdk/conformance/apps/<lang>) against a spoold built from this repository
# and a real redis-server. It needs every SDK built (Python's venv, the
# TypeScript SDK's dist/, the Java SDK's classes and classpath) and every
# toolchain: a missing one fails the target, saying which. For a local run
# of some languages: SPOOL_CONFORMANCE_LANGS=go,python go test ./sdk/conformance/
CONFORMANCE_LANGS ?= go,python,typescript,java

.PHONY: test-sdk-conformance
test-sdk-conformance: deps build-sdk-python build-sdk-typescript build-sdk-java
	SPOOL_CONFORMANCE_LANGS=$(CONFORMANCE_LANGS) $(GO) test -count=1 -timeout=15m ./sdk/conformance/

SDK_TESTS += test-sdk-conformance
