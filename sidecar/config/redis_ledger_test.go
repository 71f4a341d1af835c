package config

import (
	"strings"
	"testing"
)

// redis.tls is a mapping of files, and `tls: true` (the system's CAs)
// still reads as before; redis.key_prefix defaults to the prefix of every
// earlier release.
func TestRedisTLSAndKeyPrefixDecode(t *testing.T) {
	base := "node: {data_dir: /d}\n"
	c, err := Parse([]byte(base + "redis: {addrs: [r:6379], tls: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Redis.TLS.On() || c.Redis.TLS.CAFile != "" || c.Redis.KeyPrefix != DefaultRedisKeyPrefix || DefaultRedisKeyPrefix != "spool:l:" {
		t.Fatalf("tls: true → %+v, key_prefix %q", c.Redis.TLS, c.Redis.KeyPrefix)
	}
	c, err = Parse([]byte(base + "redis:\n  addrs: [r:6379]\n  key_prefix: \"shop-a:l:\"\n  tls:\n    ca_file: /ca.pem\n    cert_file: /c.pem\n    key_file: /k.pem\n    server_name: redis.shop.svc\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := RedisTLSConfig{CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem", ServerName: "redis.shop.svc"}
	if c.Redis.TLS != want || !c.Redis.TLS.On() || c.Redis.KeyPrefix != "shop-a:l:" {
		t.Fatalf("got %+v, prefix %q", c.Redis.TLS, c.Redis.KeyPrefix)
	}
	if c, err = Parse([]byte(base + "redis: {addrs: [127.0.0.1:6379], tls: false}\n")); err != nil || c.Redis.TLS.On() {
		t.Fatalf("tls: false → %+v, %v", c.Redis.TLS, err)
	}
	for in, msg := range map[string]string{
		"redis: {addrs: [r:6379], tls: yes-please}\n":                             "redis.tls",
		"redis: {addrs: [r:6379], tls: {ca_fil: /x}}\n":                           "did you mean ca_file",
		"redis: {addrs: [r:6379], tls: [a]}\n":                                    "redis.tls",
		"redis: {addrs: [r:6379], tls: {cert_file: /c.pem}}\n":                    "redis.tls.key_file",
		"redis: {addrs: [r:6379], key_prefix: \"a b\"}\n":                         "redis.key_prefix",
		"redis: {addrs: [r:6379], key_prefix: \"{x}\"}\n":                         "redis.key_prefix",
		"redis: {addrs: [r:6379], key_prefix: " + strings.Repeat("k", 65) + "}\n": "redis.key_prefix",
		"redis: {tls: {ca_file: /ca.pem}}\n":                                      "no address means no ledger",
	} {
		if _, err := Parse([]byte(base + in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err = %v, want one naming %q", in, err, msg)
		}
	}
}
