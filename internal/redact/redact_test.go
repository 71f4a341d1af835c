package redact

import "testing"

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://alice:pw@h:4222": "nats://alice:xxxxx@h:4222",
		"nats://tok@h:4222":      "nats://xxxxx@h:4222",
		"tok:en@h:4222":          "tok:xxxxx@h:4222",
		"tok@h:4222":             "xxxxx@h:4222",
		"tls://u:p@ss@h:4222":    "tls://u:xxxxx@h:4222",
		"nats://h:4222":          "nats://h:4222",
		"h:4222":                 "h:4222",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := URLs([]string{"nats://a:b@h:1,nats://c@h:2"})[0]; got != "nats://a:xxxxx@h:1,nats://xxxxx@h:2" {
		t.Errorf("URLs of a comma list = %q", got)
	}
}
