package table

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/log"
)

// OpenStorage opens (or creates) what a node keeps in its data dir: the
// partition log (dataDir/log) and the groups' committed positions
// (dataDir/groups). A damaged partition is quarantined, not fatal: the
// rest of the node serves. It returns the options the log runs with
// (opts with its defaults filled in); opts.Logger defaults to logger.
func OpenStorage(dataDir string, opts log.Options, logger *slog.Logger) (*log.Store, *groups.Store, log.Options, error) {
	if dataDir == "" {
		return nil, nil, opts, errors.New("engine: no data dir: set node.data_dir (or run spoold --dev for a temporary one)")
	}
	if opts.Logger == nil {
		opts.Logger = logger
	}
	opts.QuarantineCorrupt = true
	st, err := log.OpenStore(filepath.Join(dataDir, "log"), opts)
	if err != nil {
		return nil, nil, opts, fmt.Errorf("engine: %w", err)
	}
	opts = st.Options()
	gs, err := groups.Open(opts.FS, filepath.Join(dataDir, "groups"))
	if err != nil {
		_ = st.Close()
		return nil, nil, opts, fmt.Errorf("engine: %w", err)
	}
	return st, gs, opts, nil
}
