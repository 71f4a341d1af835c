# Java SDK (sdk/java, dev.spool:spool): included by the top Makefile.
# Needs a JDK 17 or later and Maven (make deps installs Debian's
# openjdk-17-jdk-headless and maven when they are missing); Maven keeps what
# it fetches in its local repository (~/.m2), so later runs work offline
# (mvn -o). The build generates the gRPC stubs from proto/spool/v1; the tests
# run a spoold built from this repository, redis-server and PostgreSQL.
JAVA_SDK := $(CURDIR)/sdk/java
MVN ?= mvn

.PHONY: test-sdk-java
test-sdk-java: deps
	@v=$$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'); \
	  [ -n "$$v" ] && [ "$${v%%.*}" -ge 17 ] 2>/dev/null || { echo "test-sdk-java: needs a JDK 17 or later on PATH (found '$$v'): make deps installs openjdk-17-jdk-headless"; exit 1; }
	@command -v $(MVN) >/dev/null || { echo "test-sdk-java: needs Maven ($(MVN)): make deps installs it"; exit 1; }
	@mkdir -p $(JAVA_SDK)/target
	$(GO) build -o $(JAVA_SDK)/target/spoold ./cmd/spoold
	cd $(JAVA_SDK) && $(MVN) -B -ntp test -Dspoold.bin=$(JAVA_SDK)/target/spoold -Dspool.test.requirePg=true

SDK_TESTS += test-sdk-java
