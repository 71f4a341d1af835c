package main

import (
	"bytes"
	"strings"
	"testing"
)

// The repair subcommand says what it needs, and refuses what it cannot do
// with an error that names the problem (the e2e test repairs a real
// damaged partition through the built binary).
func TestRepairArguments(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: spoold repair --data-dir DIR --partition TOPIC-N"},
		{[]string{"--data-dir", dir}, 2, "usage:"},
		{[]string{"--data-dir", dir, "--partition", "../etc"}, 1, "invalid partition name"},
		{[]string{"--data-dir", dir, "--partition", "orders-0"}, 1, "is the partition name topic-N"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := repair(c.args, &out, &errb); code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("repair %q: exit %d, output %q; want exit %d and %q", c.args, code, out.String()+errb.String(), c.code, c.want)
		}
	}
}
