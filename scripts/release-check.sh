#!/usr/bin/env bash
# What a release of VERSION needs before `make release` builds it
# (docs/operations.md, "Releases"): every SDK's metadata carries VERSION
# (the Python package reads the VERSION file itself; the Go SDK is versioned
# by its tag), and CHANGELOG.md has the release's entry. With RELEASE_TRY set,
# a missing CHANGELOG entry is only reported (a try build of an untagged tree).
# It reads the SDKs' files and changes nothing.
set -euo pipefail
version=${1:?usage: release-check.sh VERSION}
cd "$(dirname "$0")/.."
fail=0
ts=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' sdk/typescript/package.json | head -1)
# The project's own <version>: the first one, right after its artifactId.
java=$(sed -n '/<artifactId>spool<\/artifactId>/{n;s/^ *<version>\(.*\)<\/version>$/\1/p;q}' sdk/java/pom.xml)
for sdk in "sdk/typescript/package.json:$ts" "sdk/java/pom.xml:$java"; do
  if [ "${sdk#*:}" != "$version" ]; then
    echo "release: ${sdk%%:*} has version '${sdk#*:}', VERSION $version: set it to $version"; fail=1
  fi
done
if ! grep -q "^## \[$version\] - [0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\}$" CHANGELOG.md; then
  msg="release: CHANGELOG.md has no '## [$version] - YYYY-MM-DD' entry: the release commit turns [Unreleased] into it"
  if [ -n "${RELEASE_TRY:-}" ]; then echo "$msg (RELEASE_TRY: building anyway)"; else echo "$msg"; fail=1; fi
fi
exit $fail
