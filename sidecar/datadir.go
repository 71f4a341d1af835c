package sidecar

import (
	"log/slog"

	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/release"
	"github.com/spoolmq/spool/sidecar/config"
)

// stampDataDir records this release as the last to open the embedded
// log's data dir (release.Stamp; a broker backend keeps no data of its
// own there), once the engine opened it, and says when the release
// changed: an upgrade at INFO, a downgrade at WARN (docs/upgrading.md).
func stampDataDir(cfg *config.Config, dataDir string, logger *slog.Logger) error {
	if dataDir == "" || cfg.Storage.Broker() {
		return nil
	}
	was, err := release.Stamped(dataDir)
	switch {
	case err != nil:
		logger.Warn("the data dir's release stamp is unreadable; writing this release's", "err", err)
	case was != "" && release.Compare(was, buildinfo.Version) > 0:
		logger.Warn("data dir last opened by a newer release: running an older one on it (a downgrade)", "data_dir", dataDir, "was", was, "now", buildinfo.Version)
	case was != "" && was != buildinfo.Version:
		logger.Info("data dir last opened by another release", "data_dir", dataDir, "was", was, "now", buildinfo.Version)
	}
	return release.Stamp(dataDir)
}
