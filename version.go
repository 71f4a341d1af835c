// Package spool holds the release version of this tree: the VERSION file at
// the repository's root, embedded into every binary built from it, so that
// `go build`, `go run`, `go test` and `make release` all report the same
// version without flags. internal/buildinfo is what reads it.
//
// It imports nothing of Spool: every package may import it.
package spool

import _ "embed"

// VERSION is the file's text, a semantic version and a newline.
//
//go:embed VERSION
var VERSION string
