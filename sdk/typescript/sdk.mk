# TypeScript SDK (sdk/typescript): included by the top Makefile.
# Needs Node 20+ and npm; packages go to sdk/typescript/node_modules (npm ci,
# from the committed lockfile). The tests run a spoold built from this
# repository, redis-server and PostgreSQL (Debian's packages, installed by
# make deps).
TS_SDK := $(CURDIR)/sdk/typescript

.PHONY: build-sdk-typescript test-sdk-typescript
## build-sdk-typescript: node_modules from the lockfile and the SDK's dist/
## (npm ci runs the package's `prepare`, which builds).
build-sdk-typescript:
	@command -v node >/dev/null && node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' || { echo "$@: the TypeScript SDK needs Node 20 or later and npm"; exit 1; }
	cd $(TS_SDK) && npm ci --no-audit --no-fund --loglevel=error

test-sdk-typescript: build-sdk-typescript
	cd $(TS_SDK) && npm run --silent build:test
	$(GO) build -o $(TS_SDK)/build/spoold ./cmd/spoold
	cd $(TS_SDK) && SPOOL_TEST_REQUIRE_PG=1 SPOOLD=$(TS_SDK)/build/spoold node --test --test-concurrency=1 build/test/*.test.js

SDK_TESTS += test-sdk-typescript
