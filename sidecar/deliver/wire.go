package deliver

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"

	"github.com/spoolmq/spool/engine"
)

// Records become protos here: deliveries, `spool tail`'s records and
// dead-letter entries all take a record's id and headers through these
// functions. A record holds bytes, and on Kafka or JetStream any producer
// may have written them; a proto string must be UTF-8 (protobuf-go refuses
// to encode a message holding one that is not, and so would the app's
// decoder). docs/backends.md, "Records Spool did not write", is the
// contract these implement:
//
//   - an id that is not UTF-8 becomes "b64:" and the id in base64url
//     without padding (stable: redeliveries, redrives and the ledger see
//     the same id);
//   - a header value that is not UTF-8 is carried under the header's name
//     with "-bin" appended, in base64 (standard, padded), as gRPC metadata
//     carries binary values; a UTF-8 value keeps its name and is unchanged;
//   - a header name that is not UTF-8 has each invalid byte replaced by
//     U+FFFD.

// BinarySuffix is appended to the name of a header whose value is not
// UTF-8; the value is then base64 (standard alphabet, padded).
const BinarySuffix = "-bin"

// DerivedIDPrefix starts the id of a record whose id is not UTF-8; the
// rest is the id in base64url without padding.
const DerivedIDPrefix = "b64:"

// WireID is a record's id as a proto string.
func WireID(id []byte) string {
	if utf8.Valid(id) {
		return string(id)
	}
	return DerivedIDPrefix + base64.RawURLEncoding.EncodeToString(id)
}

// WireText is text read from a record (a header Spool wrote into a
// dead-letter entry, which anyone with write access to the topic could
// have written too) as a proto string: invalid bytes become U+FFFD.
func WireText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// WireHeader is one header as a proto map entry.
func WireHeader(h engine.Header) (name, value string) {
	name = h.Key
	if !utf8.ValidString(name) {
		name = strings.ToValidUTF8(name, "\uFFFD")
	}
	if utf8.Valid(h.Value) {
		return name, string(h.Value)
	}
	return name + BinarySuffix, base64.StdEncoding.EncodeToString(h.Value)
}

// WireHeaders is a record's headers as a proto map (nil when none); keep,
// when not nil, says which to include. A name that repeats keeps its last
// value, as it always has.
func WireHeaders(hs []engine.Header, keep func(name string) bool) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		if keep != nil && !keep(h.Key) {
			continue
		}
		k, v := WireHeader(h)
		m[k] = v
	}
	return m
}

// wireIDBytes is the length of WireID(id).
func wireIDBytes(id []byte) int {
	if utf8.Valid(id) {
		return len(id)
	}
	return len(DerivedIDPrefix) + base64.RawURLEncoding.EncodedLen(len(id))
}

// wireHeaderBytes bounds what a header takes as a proto map entry.
func wireHeaderBytes(h engine.Header) int {
	n := len(h.Key)
	if !utf8.ValidString(h.Key) {
		n *= 3 // U+FFFD for each invalid byte
	}
	if utf8.Valid(h.Value) {
		return n + len(h.Value)
	}
	return n + len(BinarySuffix) + base64.StdEncoding.EncodedLen(len(h.Value))
}
