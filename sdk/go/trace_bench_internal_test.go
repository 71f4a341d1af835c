package spool

import (
	"context"
	"testing"
)

// BenchmarkHandlerSpanNoSDK is the tracing cost per delivery when the app
// has installed no OpenTelemetry SDK (the global no-op provider), for a
// message with and without a traceparent.
func BenchmarkHandlerSpanNoSDK(b *testing.B) {
	t := newHandlerTracer(nil, []string{"orders"})
	for _, c := range []struct {
		name    string
		headers map[string]string
	}{{"no-traceparent", nil}, {"traceparent", map[string]string{HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}} {
		b.Run(c.name, func(b *testing.B) {
			m := &Message{Topic: "orders", Headers: c.headers}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, span := t.start(ctx, m)
				t.end(span, nil)
			}
		})
	}
}
