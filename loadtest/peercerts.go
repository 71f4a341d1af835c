package main

import (
	"os"
	"path/filepath"

	"github.com/spoolmq/spool/internal/testpki"
)

// peerCerts writes a run's cluster credentials into dir/peer-tls: a CA and
// one node certificate every node shares (identity spiffe://loadtest/spool,
// good for both ends of a connection), as a deployment's would be; the
// files are node.crt, node.key and node-ca.crt.
func peerCerts(dir string) (testpki.Files, error) {
	out := filepath.Join(dir, "peer-tls")
	if err := os.MkdirAll(out, 0o700); err != nil {
		return testpki.Files{}, err
	}
	ca, err := testpki.NewCA("loadtest CA")
	if err != nil {
		return testpki.Files{}, err
	}
	tmpl, err := testpki.Node("spiffe://loadtest/spool")
	if err != nil {
		return testpki.Files{}, err
	}
	return ca.WriteFiles(out, "node", tmpl)
}
