package publish

import (
	"fmt"
	"strconv"
	"strings"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/config"
)

// Limits bound what one publish may carry. Each has a name in the config
// (limits.*), a reason in errors (docs/errors.md) and is counted in
// spool_publish_rejected_total{reason}.
type Limits struct {
	MaxMessageBytes  int // key + payload + headers of one message
	MaxKeyBytes      int
	MaxIDBytes       int
	MaxHeaders       int
	MaxHeaderBytes   int // all header names and values of one message
	MaxBatchMessages int // messages in one request
}

// DefaultLimits are the documented defaults (docs/configuration.md).
var DefaultLimits = Limits{
	MaxMessageBytes:  config.DefaultMaxMessageBytes,
	MaxKeyBytes:      config.DefaultMaxKeyBytes,
	MaxIDBytes:       config.DefaultMaxIDBytes,
	MaxHeaders:       config.DefaultMaxHeaders,
	MaxHeaderBytes:   config.DefaultMaxHeaderBytes,
	MaxBatchMessages: config.DefaultMaxBatchMessages,
}

// reservedHeaderPrefix marks headers that Spool itself sets (dead-letter
// metadata, trace context handling); producers may not send them.
const reservedHeaderPrefix = "spool-"

// limitErr is message i breaking a limit (i < 0: the request itself).
// Nothing of the request is written.
func limitErr(r apierr.Reason, i int, limit, format string, args ...any) *apierr.Error {
	e := apierr.New(r, format, args...)
	if i >= 0 {
		e.Msg = fmt.Sprintf("message %d: %s", i, e.Msg)
		e.With("index", strconv.Itoa(i))
	}
	if limit != "" {
		e.With("limit", limit)
	}
	return e
}

// checkTopic refuses names that no configuration can declare, before the
// engine is asked: such a name is invalid, not merely unknown, and it must
// not reach a log line or an error message in full (a name can be as long
// as the request).
func checkTopic(topic string) error {
	const rule = "topic names are 1 to %d bytes of a-z A-Z 0-9 . _ -"
	switch {
	case topic == "":
		return apierr.New(apierr.TopicRequired, "topic is empty: name the topic to publish to")
	case len(topic) > config.MaxNameBytes:
		return apierr.New(apierr.InvalidTopicName, "topic name %s is %d bytes, more than %d ("+rule+"): publish to a topic declared under topics in spoold's config",
			quoteShort(topic), len(topic), config.MaxNameBytes, config.MaxNameBytes)
	case !config.ValidNameBytes(topic):
		return apierr.New(apierr.InvalidTopicName, "topic name %s has a character no topic can have ("+rule+"): publish to a topic declared under topics in spoold's config",
			quoteShort(topic), config.MaxNameBytes)
	}
	return nil
}

// quoteShort quotes at most the first 32 bytes of s.
func quoteShort(s string) string {
	const n = 32
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:n]) + "…"
}

// check validates one message and returns its size in bytes.
func (l Limits) check(i int, m *spoolv1.PublishMessage) (int, error) {
	if n := len(m.GetKey()); n > l.MaxKeyBytes {
		return 0, limitErr(apierr.KeyTooLarge, i, "max_key_bytes", "key is %d bytes, limit max_key_bytes is %d: use a shorter key (an id, not a document)", n, l.MaxKeyBytes)
	}
	if n := len(m.GetId()); n > l.MaxIDBytes {
		return 0, limitErr(apierr.IDTooLarge, i, "max_id_bytes", "id is %d bytes, limit max_id_bytes is %d: use a shorter id (a UUID is 36 bytes) or leave it empty for one chosen by spoold", n, l.MaxIDBytes)
	}
	if n := len(m.GetHeaders()); n > l.MaxHeaders {
		return 0, limitErr(apierr.TooManyHeaders, i, "max_headers", "%d headers, limit max_headers is %d: send fewer headers (structured data belongs in the payload)", n, l.MaxHeaders)
	}
	hdrBytes := 0
	for k, v := range m.GetHeaders() {
		if k == "" {
			return 0, limitErr(apierr.InvalidHeaderName, i, "", "a header has an empty name: give every header a name")
		}
		if strings.HasPrefix(strings.ToLower(k), reservedHeaderPrefix) {
			return 0, limitErr(apierr.ReservedHeader, i, "", "header %s: names starting with %q are reserved for Spool: rename it", quoteShort(k), reservedHeaderPrefix)
		}
		hdrBytes += len(k) + len(v)
	}
	if hdrBytes > l.MaxHeaderBytes {
		return 0, limitErr(apierr.HeadersTooLarge, i, "max_header_bytes", "headers are %d bytes, limit max_header_bytes is %d: move large values into the payload", hdrBytes, l.MaxHeaderBytes)
	}
	size := len(m.GetKey()) + len(m.GetPayload()) + hdrBytes
	if size > l.MaxMessageBytes {
		return 0, limitErr(apierr.MessageTooLarge, i, "max_message_bytes", "message is %d bytes (key+payload+headers), limit max_message_bytes is %d: store large blobs elsewhere and publish a reference", size, l.MaxMessageBytes)
	}
	return size + len(m.GetId()), nil
}
