package grpcbuf

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// The server codec decodes a request with invalid UTF-8 to an empty
// message and records the field's path; valid requests decode as before,
// and records are bounded.
func TestUTF8ServerCodec(t *testing.T) {
	r := &UTF8Refusals{}
	c := utf8Codec{NewCodec(New()), r}
	for _, tc := range []struct {
		name  string
		msg   proto.Message
		field string
	}{
		{"topic", &spoolv1.PublishRequest{Topic: "\xff"}, "topic"},
		{"an id", &spoolv1.PublishRequest{Topic: "t", Messages: []*spoolv1.PublishMessage{{}, {}, {Id: "a\xc0"}}}, "messages[2].id"},
		{"a header name", &spoolv1.PublishRequest{Topic: "t", Messages: []*spoolv1.PublishMessage{{Headers: map[string]string{"\xfe": "v"}}}}, "messages[0].headers.key"},
		{"a start topic", &spoolv1.SubscribeRequest{Start: &spoolv1.Start{Group: "g", Topics: []string{"a", "\xff"}}}, "start.topics[1]"},
		{"valid", &spoolv1.PublishRequest{Topic: "orders"}, ""},
	} {
		b := marshalUnchecked(t, tc.msg)
		into := tc.msg.ProtoReflect().New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, into); err != nil {
			t.Fatalf("%s: Unmarshal: %v", tc.name, err)
		}
		field, ok := r.Take(into)
		if field != tc.field || ok != (tc.field != "") {
			t.Errorf("%s: Take = %q, %v; want %q", tc.name, field, ok, tc.field)
		}
		if ok && !proto.Equal(into, tc.msg.ProtoReflect().New().Interface()) {
			t.Errorf("%s: decoded to %v, want an empty message", tc.name, into)
		}
		if !ok && !proto.Equal(into, tc.msg) {
			t.Errorf("%s: decoded to %v, want %v", tc.name, into, tc.msg)
		}
	}
	// Records no interceptor takes are bounded: past the bound, the error.
	b := marshalUnchecked(t, &spoolv1.PublishRequest{Topic: "\xff"})
	for i := range MaxUTF8Refusals + 1 {
		err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &spoolv1.PublishRequest{})
		if (err != nil) != (i == MaxUTF8Refusals) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
}

// marshalUnchecked encodes m with vtproto's code, which does not check
// UTF-8 (protobuf-go refuses to).
func marshalUnchecked(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := m.(interface{ MarshalVT() ([]byte, error) }).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
