package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScenariosLoad checks that every scenario file parses and validates,
// and that the consumer-program scenarios are drain and e2e with the
// settings of drain.yaml and e2e.yaml but for their consumer.
func TestScenariosLoad(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "loadtest", "scenarios")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := loadScenario(dir, e.Name()[:len(e.Name())-len(".yaml")]); err != nil {
			t.Error(err)
		}
	}
	for _, mode := range []string{"drain", "e2e"} {
		base, err := loadScenario(dir, mode)
		if err != nil {
			t.Fatal(err)
		}
		if base.ConsumerSDK != "go" {
			t.Errorf("%s: consumer_sdk %q, want the default go", mode, base.ConsumerSDK)
		}
		for lang := range consumerLangs {
			name := mode + "-" + lang
			sc, err := loadScenario(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			if sc.ConsumerSDK != lang || sc.Mode != mode {
				t.Errorf("%s: consumer_sdk %q, mode %s", name, sc.ConsumerSDK, sc.Mode)
			}
			if sc.MessageBytes != base.MessageBytes || sc.Partitions != base.Partitions || sc.ConsumerConcurrency != base.ConsumerConcurrency ||
				sc.ConsumerPrefetch != base.ConsumerPrefetch || sc.Producers != base.Producers || sc.Fsync != base.Fsync || sc.Ordering != base.Ordering {
				t.Errorf("%s differs from %s.yaml in more than its consumer: %+v", name, mode, sc)
			}
		}
	}
}

func TestConsumerSDKValidation(t *testing.T) {
	bad := map[string]string{
		"unknown SDK":           "mode: e2e\nmessages: 10\nconsumer_sdk: rust\n",
		"a program for publish": "mode: publish\nmessages: 10\nconsumer_sdk: java\n",
		"options without SDK":   "mode: e2e\nmessages: 10\nconsumer_options: {loop: uvloop}\n",
	}
	dir := t.TempDir()
	for name, text := range bad {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadScenario(dir, path); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "consumer_") {
			t.Errorf("%s: %v: the error does not name the field", name, err)
		}
	}
}
