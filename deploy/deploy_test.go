// Package deploy holds deployment files; its test checks that they parse
// and that the spoold configuration they embed is one spoold accepts.
package deploy

import (
	"bytes"
	"errors"
	"flag"
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

// Every spool.yaml carried by a ConfigMap of the example manifests (a key
// ending in .yaml) is one spoold accepts, with the environment the manifests
// give it (the pod IP as cluster.advertise). deploy/check resolves each
// container's own args and environment against the mounted file.
func TestExampleSpoolConfigsAreValid(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests found: %v", err)
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc struct {
				Kind     string                `yaml:"kind"`
				Metadata struct{ Name string } `yaml:"metadata"`
				Data     map[string]string     `yaml:"data"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc.Kind != "ConfigMap" {
				continue
			}
			for key, text := range doc.Data {
				if filepath.Ext(key) != ".yaml" {
					continue
				}
				checked++
				path := filepath.Join(t.TempDir(), key)
				if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				env := map[string]string{"SPOOL_NODE_ID": "orders-0"}
				var clustered struct {
					Cluster struct{ Listen string } `yaml:"cluster"`
				}
				if err := yaml.Unmarshal([]byte(text), &clustered); err == nil && clustered.Cluster.Listen != "" {
					env["SPOOL_CLUSTER_ADVERTISE"] = "10.0.0.7:7072" // the pod IP
				}
				lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
				if _, err := config.Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), []string{"--config", path}, lookup); err != nil {
					t.Errorf("%s: ConfigMap %s key %s is refused by spoold: %v", f, doc.Metadata.Name, key, err)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no spool.yaml found in a ConfigMap of the examples")
	}
}
