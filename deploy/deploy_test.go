// Package deploy holds deployment files; its test checks that they parse
// and that the spoold configuration they embed is one spoold accepts.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/spoolmq/spool/sidecar/config"
)

func TestYAMLFilesParse(t *testing.T) {
	files, err := filepath.Glob("*/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML files found: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for n := 0; ; n++ {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, n, err)
			}
		}
	}
}

// The example's ConfigMap carries a spool.yaml that spoold accepts as is.
func TestExampleSpoolConfigIsValid(t *testing.T) {
	b, err := os.ReadFile("kubernetes/sidecar-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	found := false
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind != "ConfigMap" {
			continue
		}
		found = true
		if _, err := config.Parse([]byte(doc.Data["spool.yaml"])); err != nil {
			t.Fatalf("the example's spool.yaml is refused by spoold: %v", err)
		}
	}
	if !found {
		t.Fatal("no ConfigMap with spool.yaml in the example")
	}
}
