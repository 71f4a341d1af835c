package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/spoolmq/spool/internal/release"
)

// version prints which release this spoold is (internal/buildinfo): the
// version, commit and Go version, then the peer protocol and data formats it
// speaks; --json prints the same as one JSON object.
func version(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spoold version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spoold version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	info := release.Get()
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(info); err != nil {
			fmt.Fprintln(stderr, "spoold version:", err)
			return 1
		}
		return 0
	}
	fmt.Fprint(stdout, info.Text("spoold"))
	return 0
}
