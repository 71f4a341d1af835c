package apps

import (
	"testing"

	"github.com/spoolmq/spool/sidecar/config"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"orders", "orders", true},
		{"orders", "orders2", false},
		{"orders", "order", false},
		{"orders*", "orders", true},
		{"orders*", "orders.eu", true},
		{"audit.*", "audit.login", true},
		{"audit.*", "audit", false},
		{"audit.*", "auditx", false},
		{"*", "anything", true},
		{"*", "", true},
		{"", "", true},
		{"", "x", false},
		{"ORDERS", "orders", false}, // names are case-sensitive
	} {
		if got := Match(c.pattern, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestPolicy(t *testing.T) {
	list := func(s ...string) *[]string { return &s }
	a := &config.AppsConfig{Identities: []config.AppIdentityConfig{
		{Name: "shop", Publish: list("orders", "audit.*"), Subscribe: list("payments:billing", "orders.dlq.*")},
		{Name: "reader", Publish: list()}, // subscribe absent: any
		{Name: "*", Publish: list("public.*"), Subscribe: list()},
	}}
	p := NewPolicy(a)
	for _, c := range []struct {
		id, topic, group string
		pub, sub         bool
	}{
		{"shop", "orders", "x", true, false},
		{"shop", "audit.login", "x", true, false},
		{"shop", "payments", "billing", false, true},
		{"shop", "payments", "mail", false, false},
		{"shop", "orders.dlq.mail", "alerts", false, true}, // a topic pattern alone: any group
		{"reader", "orders", "mail", false, true},
		{"stranger", "public.news", "g", true, false}, // the "*" entry
		{"stranger", "orders", "g", false, false},
	} {
		if got := p.CanPublish(c.id, c.topic); got != c.pub {
			t.Errorf("CanPublish(%s, %s) = %v, want %v", c.id, c.topic, got, c.pub)
		}
		if got := p.CanSubscribe(c.id, c.topic, c.group); got != c.sub {
			t.Errorf("CanSubscribe(%s, %s, %s) = %v, want %v", c.id, c.topic, c.group, got, c.sub)
		}
	}
	// No identities: everything is allowed (the behaviour before scopes).
	open := NewPolicy(&config.AppsConfig{})
	if !open.CanPublish("local", "orders") || !open.CanSubscribe("anyone", "orders", "mail") {
		t.Error("without apps.identities everything must be allowed")
	}
}
