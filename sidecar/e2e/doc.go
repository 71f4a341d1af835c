// Package e2e holds Spool's end-to-end tests: they build and run the real
// spoold binary and a real application process (testapp, on the Go SDK)
// and talk to them over gRPC, as a user's deployment would.
package e2e
