package publish

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/tracing"
)

// startSpans opens one span per message of an accepted request, a child of
// the traceparent in its headers (a new root, subject to the sampler,
// without one), starting when the request arrived. A request refused by
// validation records none: nothing of it was written.
func (b *batch) startSpans(msgs []*spoolv1.PublishMessage) {
	tr := b.s.cfg.Tracer
	name := b.topic + " publish"
	b.spans = make([]trace.Span, len(msgs))
	for i, m := range msgs {
		h := m.GetHeaders()
		ctx := tracing.Parent(context.Background(), h[tracing.HeaderTraceparent], h[tracing.HeaderTracestate])
		_, b.spans[i] = tr.Start(ctx, name,
			trace.WithTimestamp(b.start),
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				tracing.System.String(tracing.SystemName),
				tracing.Operation.String("publish"),
				tracing.Destination.String(b.topic),
				tracing.Partition.String(strconv.Itoa(int(b.results[i].Partition))),
				tracing.MessageID.String(b.results[i].Id),
			))
	}
}

// endSpans ends the request's spans with its outcome: the offsets, or the
// error and its reason.
func (b *batch) endSpans(err error) {
	for i, span := range b.spans {
		if err != nil {
			span.SetAttributes(tracing.Outcome.String("error"), attribute.String("error.type", string(apierr.Classify(err))))
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(tracing.Outcome.String("stored"), tracing.Offset.Int64(b.results[i].Offset))
		}
		span.End()
	}
}
