package dlq

import (
	"encoding/base64"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/deliver"
)

// A dead-letter entry read from the topic becomes a proto that encodes,
// whatever bytes its id, its app's headers and its own spool-dlq-* headers
// hold (anyone who can write the dead-letter topic can write them): the
// app's binary header as <name>-bin in base64, the id as b64:, Spool's own
// texts with invalid bytes replaced.
func TestDeadLetterOfBinaryRecordEncodes(t *testing.T) {
	bin := []byte{0x0a, 0xff, 0xfe, 0x01}
	r := &engine.Record{ID: []byte{0xff, 0xfe}, Value: []byte("v"), Headers: []engine.Header{
		{Key: "trace-bin", Value: bin},
		{Key: "a", Value: []byte("x")},
		{Key: deliver.HeaderDLQReason, Value: []byte("bad \xff reason")},
		{Key: deliver.HeaderDLQLastError, Value: []byte{0xc3}},
		{Key: deliver.HeaderDLQGroup, Value: []byte("workers")},
	}}
	dl := toDeadLetter(r, 0)
	if _, err := proto.Marshal(dl); err != nil {
		t.Fatalf("the entry does not encode: %v", err)
	}
	m := dl.GetMessage()
	if m.GetMessageId() != "b64:__4" || m.GetHeaders()["trace-bin-bin"] != base64.StdEncoding.EncodeToString(bin) || m.GetHeaders()["a"] != "x" {
		t.Fatalf("id %q, headers %q", m.GetMessageId(), m.GetHeaders())
	}
	if dl.GetReason() != "bad \uFFFD reason" || m.GetGroup() != "workers" || len(m.GetHeaders()) != 2 {
		t.Fatalf("reason %q, group %q, headers %q", dl.GetReason(), m.GetGroup(), m.GetHeaders())
	}
}
