// Package redact keeps secrets out of log lines and errors. It imports
// nothing of Spool's and must stay that way: the engine and the sidecar
// both use it.
package redact

import "strings"

// URL returns a URL (or host:port) with its password or token replaced by
// xxxxx: nats://user:xxxxx@host:4222, nats://xxxxx@host:4222 (a lone
// user name is what NATS takes as a token). A string without userinfo is
// returned as it is, malformed or not.
func URL(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return s
	}
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 && i < at {
		scheme = s[:i+3]
	}
	user := s[len(scheme):at]
	if c := strings.IndexByte(user, ':'); c >= 0 {
		return scheme + user[:c] + ":xxxxx" + s[at:]
	}
	return scheme + "xxxxx" + s[at:]
}

// URLs is URL of each; a comma list within one entry is redacted piece by
// piece.
func URLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, s := range urls {
		parts := strings.Split(s, ",")
		for j, p := range parts {
			parts[j] = URL(p)
		}
		out[i] = strings.Join(parts, ",")
	}
	return out
}
