package deliver

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Whatever bytes a record's id and headers hold, the proto made of them
// encodes; UTF-8 ids and values are unchanged, and the binary ones come
// back by the documented decoding (docs/backends.md).
func TestWireRecordEncodesAndRoundTrips(t *testing.T) {
	ids := [][]byte{[]byte("order-1"), {0xff, 0xfe}, {}, []byte("ok\xc3")}
	values := [][]byte{[]byte("text"), {0x0a, 0xff, 0xfe, 0x01}, {}, []byte("日本"), {0xc3}}
	for _, id := range ids {
		for _, v := range values {
			hs := []engine.Header{{Key: "h", Value: v}, {Key: "n\xff", Value: []byte("x")}}
			d := &spoolv1.Delivery{MessageId: WireID(id), Headers: WireHeaders(hs, nil)}
			if _, err := proto.Marshal(d); err != nil {
				t.Fatalf("id %q, value %q: %v", id, v, err)
			}
			if got := d.GetMessageId(); strings.HasPrefix(got, DerivedIDPrefix) {
				back, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(got, DerivedIDPrefix))
				if err != nil || !bytes.Equal(back, id) {
					t.Fatalf("id %q derived as %q, decodes to %q (%v)", id, got, back, err)
				}
			} else if got != string(id) {
				t.Fatalf("UTF-8 id %q delivered as %q", id, got)
			}
			if got, ok := d.GetHeaders()["h"]; ok {
				if got != string(v) {
					t.Fatalf("UTF-8 value %q delivered as %q", v, got)
				}
			} else {
				back, err := base64.StdEncoding.DecodeString(d.GetHeaders()["h"+BinarySuffix])
				if err != nil || !bytes.Equal(back, v) {
					t.Fatalf("value %q: headers %q, decodes to %q (%v)", v, d.GetHeaders(), back, err)
				}
			}
			if d.GetHeaders()["n\uFFFD"] != "x" {
				t.Fatalf("a name that is not UTF-8: headers %q", d.GetHeaders())
			}
			var est int
			for _, h := range hs {
				est += wireHeaderBytes(h)
			}
			if n := wireIDBytes(id); n != len(d.GetMessageId()) {
				t.Fatalf("wireIDBytes(%q) = %d, the id is %d bytes", id, n, len(d.GetMessageId()))
			}
			var real int
			for k, v := range d.GetHeaders() {
				real += len(k) + len(v)
			}
			if est < real {
				t.Fatalf("header size estimate %d below the %d bytes built", est, real)
			}
		}
	}
}
