// Package tracing owns spoold's OpenTelemetry spans: the attribute names
// they carry, reading a message's W3C trace context from its headers, and
// the TracerProvider that exports them over OTLP/gRPC when
// tracing.otlp_endpoint is configured (docs/configuration.md, "tracing").
//
// Spans are recorded only through a trace.Tracer handed down in the
// publish and deliver packages' configs: spoold never sets or reads
// OpenTelemetry's global provider. A nil Tracer means tracing is off, and
// the hot paths then do no tracing work at all (no allocation per
// message; BenchmarkDeliverAck in sidecar/deliver).
//
// It imports the OpenTelemetry API and SDK and the OTLP exporter, and
// nothing of the engine or of the rest of the sidecar.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// scopeName is the instrumentation scope of spoold's spans.
const scopeName = "github.com/spoolmq/spool/sidecar"

// Header names of the W3C trace context carried by a message. spoold
// passes them through untouched.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Attribute keys of spoold's spans: the OpenTelemetry messaging semantic
// conventions, and Spool's own under messaging.spool.*.
const (
	System      = attribute.Key("messaging.system")
	Operation   = attribute.Key("messaging.operation.type")
	Destination = attribute.Key("messaging.destination.name")
	Partition   = attribute.Key("messaging.destination.partition.id")
	Group       = attribute.Key("messaging.consumer.group.name")
	MessageID   = attribute.Key("messaging.message.id")
	Attempt     = attribute.Key("messaging.spool.attempt")
	Offset      = attribute.Key("messaging.spool.offset")
	Outcome     = attribute.Key("messaging.spool.outcome")
	Consumer    = attribute.Key("messaging.spool.consumer")
)

// SystemName is the value of messaging.system.
const SystemName = "spool"

// Parent returns a context holding the remote span context that
// traceparent (and tracestate) describe, or ctx unchanged when traceparent
// is empty or malformed (the span is then a new root).
func Parent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier{traceparent, tracestate})
}

// carrier reads the two headers without building a map.
type carrier struct{ parent, state string }

func (c carrier) Get(key string) string {
	switch key {
	case HeaderTraceparent:
		return c.parent
	case HeaderTracestate:
		return c.state
	}
	return ""
}
func (carrier) Set(string, string) {}
func (carrier) Keys() []string     { return []string{HeaderTraceparent, HeaderTracestate} }

// Config configures the exporting provider.
type Config struct {
	// Endpoint is the OTLP/gRPC collector: host:port (plaintext), or a URL
	// http://host:port (plaintext) or https://host:port (TLS).
	Endpoint string
	// SampleRatio is the share of new traces (messages published without a
	// traceparent) that are recorded, 0..1; a message that has one follows
	// its publisher's sampling decision.
	SampleRatio float64
	// Node and Version describe this spoold in the spans' resource.
	Node, Version string
}

// Provider is a TracerProvider exporting over OTLP/gRPC, with its
// Shutdown (which flushes the spans not yet exported).
type Provider struct {
	*sdktrace.TracerProvider
}

// NewProvider builds the exporting provider. The exporter connects lazily:
// a collector that is down loses spans (the SDK's batch queue is bounded,
// 2048 spans) and never slows publishing or delivery.
func NewProvider(cfg Config) (*Provider, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("tracing: no OTLP endpoint")
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(10 * time.Second)}
	if strings.Contains(cfg.Endpoint, "://") {
		opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
	} else {
		opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing.otlp_endpoint %q: %w", cfg.Endpoint, err)
	}
	res := sdkresource.NewSchemaless(
		attribute.String("service.name", "spoold"),
		attribute.String("service.version", cfg.Version),
		attribute.String("service.instance.id", cfg.Node),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	return &Provider{tp}, nil
}

// Tracer returns spoold's tracer from tp, or nil (tracing off) for a nil tp.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(scopeName)
}
