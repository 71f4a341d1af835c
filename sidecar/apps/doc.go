// Package apps decides who an app is and what it may do at the sidecar's app
// port: authentication (a bearer token from apps.tokens_file, or the
// default identity for a caller on a Unix socket or loopback), scopes (which
// topics an identity may publish to, which subscriptions it may consume)
// and publish rates (token buckets per identity).
//
// The decisions are pure: Match and Policy for scopes, Bucket for rates
// (time is passed in), Tokens for tokens. Gate puts them together for the
// sidecar's gRPC edge, with the clock injected, and turns refusals into
// apierr errors (UNAUTHENTICATED, PUBLISH_NOT_ALLOWED,
// SUBSCRIBE_NOT_ALLOWED, RATE_LIMITED) counted in spool_app_denied_total.
//
// It imports config, apierr and metrics; it must never import a service
// package (publish, deliver): they call it through function values.
package apps
