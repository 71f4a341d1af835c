# Java SDK (sdk/java, dev.spool:spool): included by the top Makefile.
# Needs a JDK 17 or later and Maven (make deps installs Debian's
# openjdk-17-jdk-headless and maven when they are missing); Maven keeps what
# it fetches in its local repository (~/.m2), so later runs work offline
# (mvn -o). The build generates the gRPC stubs from proto/spool/v1; the tests
# run a spoold built from this repository, redis-server and PostgreSQL. Then
# sdk/installtest's TestJavaInstall installs the release jar (`mvn -f sdk/java
# install`) into a scratch local repository and runs a consumer project with
# docs/sdk-java.md's pom against spoold, its worker on JAVA21_HOME's JDK.
JAVA_SDK := $(CURDIR)/sdk/java
MVN ?= mvn
# A JDK 21+ beside the default 17, for the virtual-thread runs (the machine's
# Temurin 25; the SDK is compiled for 17 either way).
JAVA21_HOME ?= $(or $(firstword $(wildcard /usr/lib/jvm/temurin-2[1-9]-jdk* /usr/lib/jvm/java-2[1-9]-openjdk*)),/usr/lib/jvm/temurin-25-jdk-amd64)

.PHONY: java-toolchain build-sdk-java test-sdk-java
java-toolchain:
	@v=$$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'); \
	  [ -n "$$v" ] && [ "$${v%%.*}" -ge 17 ] 2>/dev/null || { echo "the Java SDK needs a JDK 17 or later on PATH (found '$$v'): make deps installs openjdk-17-jdk-headless"; exit 1; }
	@command -v $(MVN) >/dev/null || { echo "the Java SDK needs Maven ($(MVN)): make deps installs it"; exit 1; }

## build-sdk-java: the SDK's classes (target/classes) and its runtime
## classpath (target/classpath.txt), for programs run on the SDK outside Maven.
build-sdk-java: java-toolchain
	cd $(JAVA_SDK) && $(MVN) -B -ntp -q -DskipTests compile dependency:build-classpath -Dmdep.includeScope=runtime -Dmdep.outputFile=target/classpath.txt

test-sdk-java: deps java-toolchain
	@mkdir -p $(JAVA_SDK)/target
	$(GO) build -o $(JAVA_SDK)/target/spoold ./cmd/spoold
	cd $(JAVA_SDK) && $(MVN) -B -ntp test -Dspoold.bin=$(JAVA_SDK)/target/spoold -Dspool.test.requirePg=true
	@[ -x $(JAVA21_HOME)/bin/java ] || { echo "no JDK 21+ at JAVA21_HOME=$(JAVA21_HOME): the virtual-thread runs need one"; exit 1; }
	@echo "The tests that run handlers again, on $(JAVA21_HOME) (virtual threads):"
	cd $(JAVA_SDK) && $(MVN) -B -ntp surefire:test -Djvm=$(JAVA21_HOME)/bin/java -Dtest='SubscribeTest,DrainTest,AsyncTest,CallbackTest' -Dspoold.bin=$(JAVA_SDK)/target/spoold
	SPOOL_INSTALL_LANGS=java SPOOL_JAVA21_HOME=$(JAVA21_HOME) $(GO) test -count=1 -timeout=10m -run 'TestJavaInstall' -v ./sdk/installtest/

SDK_TESTS += test-sdk-java
