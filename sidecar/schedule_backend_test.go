package sidecar

import (
	"errors"
	"strings"
	"testing"

	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/config"
)

// On a broker backend a scheduled publish is refused with
// FAILED_PRECONDITION naming the backend (docs/backends.md), and there is
// nothing to list or cancel.
func TestScheduledRefusedOnBrokers(t *testing.T) {
	for _, b := range []string{config.BackendKafka, config.BackendJetStream} {
		cfg := &config.Config{}
		cfg.Storage.Backend = b
		_, err := scheduleRetention(cfg, nil)("orders")
		var e *apierr.Error
		if !errors.As(err, &e) || e.Reason != apierr.BackendUnsupported || e.Reason.Code().String() != "FailedPrecondition" || !strings.Contains(e.Error(), b+" backend") {
			t.Errorf("%s: scheduled publish: %v; want BACKEND_UNSUPPORTED (FAILED_PRECONDITION) naming the backend", b, err)
		}
		if s := newScheduled(cfg, nil); s != nil || s.cancel() != nil {
			t.Errorf("%s: list and cancel offered", b)
		}
	}
}
