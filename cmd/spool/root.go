package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Environment variables spool reads.
const (
	envAdmin = "SPOOL_ADMIN" // spoold's admin address (--admin)
	envApp   = "SPOOL_ADDR"  // spoold's app address (--addr of produce), as the SDKs
)

// app is one run of spool: the global flags and the connections it opened.
type app struct {
	env
	admin   string    // --admin
	auth    authFlags // --token, --context, ...
	root    *cobra.Command
	output  string        // -o
	timeout time.Duration // --timeout
	conns   []*grpc.ClientConn
	drawn   bool // a progress bar is on stderr's current line
}

// run runs spool with args and returns the exit code. Errors are printed
// as one line on stderr; cobra's own usage errors exit 2.
func run(ctx context.Context, e env, args []string) int {
	if e.getenv == nil {
		e.getenv = func(string) (string, bool) { return "", false }
	}
	a := &app{env: e}
	defer a.close()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	a.progressDone() // an error goes on its own line, not after a progress bar
	if err == nil {
		return exitOK
	}
	var xe *exitError
	if !errors.As(err, &xe) {
		// cobra's errors (unknown command or flag, wrong arguments) are usage errors.
		xe = &exitError{code: exitUsage, msg: oneLine(err.Error()) + " (see " + cmd.CommandPath() + " --help)"}
	}
	fmt.Fprintln(e.stderr, "spool:", xe.msg)
	return xe.code
}

func (a *app) rootCommand() *cobra.Command {
	admin := a.defaultAdmin()
	root := &cobra.Command{
		Use:   "spool",
		Short: "Look at and operate Spool sidecars",
		Long: `spool talks to a running spoold: topics, consumer groups and their lag,
dead letters (count, read, redrive, purge), offsets; it publishes messages,
follows a topic live (tail), sizes a deployment (plan, also from a running
sidecar's metrics), and runs a development sidecar.

Exit codes: 0 done, 1 the operation failed or was refused, 2 usage error,
3 the sidecar did not answer. docs/cli.md describes every command.`,
		Example: `  spool dev                          # a development sidecar in the foreground
  spool topic list
  spool group describe demo-app -o json
  spool tail demo --group demo-app
  SPOOL_ADMIN=10.0.0.5:7071 spool dlq peek --group email-workers --topic order-placed`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch a.output {
			case "table", "json", "yaml":
				return nil
			}
			return usageErr("-o %q: use table, json or yaml", a.output)
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErr("%s (see %s --help)", oneLine(err.Error()), cmd.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.admin, "admin", admin, "spoold's admin address, host:port or unix:///path ("+envAdmin+", else the context's)")
	a.bindAuthFlags(root)
	a.root = root
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	pf.DurationVar(&a.timeout, "timeout", 10*time.Second, "how long to wait for the sidecar to answer a call")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(a.topicCommand(), a.groupCommand(), a.clusterCommand(), a.dlqCommand(), a.produceCommand(), a.scheduledCommand(), a.tailCommand(),
		a.planCommand(), a.devCommand(), a.demoCommand(), a.versionCommand())
	return root
}

// adminClient connects to --admin. gRPC connects lazily: an absent
// sidecar shows up as UNAVAILABLE on the first call (callError).
func (a *app) adminClient() (spoolv1.AdminServiceClient, error) {
	addr, opts, err := a.adminTarget()
	if err != nil {
		return nil, err
	}
	conn, err := a.dial(addr, "--admin", opts...)
	if err != nil {
		return nil, err
	}
	return spoolv1.NewAdminServiceClient(conn), nil
}

// dial connects to addr, in plaintext unless opts say otherwise.
func (a *app) dial(addr, flag string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target := addr
	if !strings.HasPrefix(addr, "unix:") {
		target = "passthrough:///" + addr
	}
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, usageErr("%s %q: %v: give host:port", flag, addr, err)
	}
	a.conns = append(a.conns, conn)
	return conn, nil
}

func (a *app) close() {
	for _, c := range a.conns {
		_ = c.Close()
	}
}

// call bounds one call to the sidecar by --timeout.
func (a *app) call(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), a.timeout)
}

// adminErr is callError for the admin address.
func (a *app) adminErr(what string, err error) error {
	return callError(what, a.admin, "--admin or "+envAdmin, err)
}

// render writes v as JSON or YAML, or calls table for -o table.
func (a *app) render(v any, table func(w io.Writer)) error {
	switch a.output {
	case "json":
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // payloads and reasons as written: <, >, & unescaped
		if err := enc.Encode(v); err != nil {
			return failed("encoding JSON: %v", err)
		}
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return failed("encoding YAML: %v", err)
		}
		fmt.Fprint(a.stdout, string(b))
	default:
		table(a.stdout)
	}
	return nil
}

// newTable is an aligned table: cells separated by tabs, columns two
// spaces apart. Flush it when done. No colour: output is the same on a
// terminal and in a pipe.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes one table row, each cell through termText.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, termText(fmt.Sprint(c)))
	}
	fmt.Fprintln(w)
}

// timeText formats Unix milliseconds for people and scripts alike (RFC
// 3339, UTC, milliseconds); 0 is "".
func (a *app) timeText(ms int64) string {
	switch {
	case ms == 0:
		return ""
	case a.redact:
		return "<time>"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// ageMs is a lag age as reported, or 0 in redacted output when nonzero
// would vary between runs.
func (a *app) ageMs(ms int64) int64 {
	if a.redact && ms > 0 {
		return -1
	}
	return ms
}

// ageText formats an age in milliseconds for a table: 0s, 850ms, 12.3s, 5m12s.
func ageText(ms int64) string {
	if ms < 0 {
		return "<age>"
	}
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// example formats a command's examples for --help.
func example(lines ...string) string {
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}
