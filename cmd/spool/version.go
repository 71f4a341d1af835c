package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/spoolmq/spool/internal/release"
)

func (a *app) versionCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Show which release this spool is",
		Long: `Shows this spool's release: its version, the commit it was built from and the
Go version that built it, then the peer protocol and data formats of that
release. It calls no sidecar: ` + "`spool cluster status`" + ` shows the version of
the spoold answering.`,
		Example: example(
			"spool version",
			"spool version --json"),
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				a.output = "json"
			}
			info := release.Get()
			return a.render(info, func(w io.Writer) { fmt.Fprint(w, info.Text("spool")) })
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (as -o json)")
	return c
}
