package topics

import "github.com/twmb/franz-go/pkg/kgo"

// Record header names. The CloudEvents Kafka binding puts event attributes in
// ce_* headers in binary mode; canopy adds its own under "canopy-".
const (
	// HeaderContentType is the CloudEvents Kafka binding's content type header.
	HeaderContentType = "content-type"
	// HeaderTraceParent and HeaderTraceState carry W3C trace context, so one
	// trace runs from an agent's event to the conductor's wake.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// HeaderSchemaVersion is the schema version of a wake's value.
	HeaderSchemaVersion = "canopy-schema-version"
	// HeaderDeadLetterReason, HeaderDeadLetterTopic, HeaderDeadLetterPartition
	// and HeaderDeadLetterOffset tell, on a dead-lettered record, why it was
	// refused and where it came from.
	HeaderDeadLetterReason    = "canopy-dlq-reason"
	HeaderDeadLetterTopic     = "canopy-dlq-topic"
	HeaderDeadLetterPartition = "canopy-dlq-partition"
	HeaderDeadLetterOffset    = "canopy-dlq-offset"
	// HeaderDeadLetterValueOmitted, on a dead letter without a value, says
	// the size in bytes of the value left out because the dead letter
	// would have been larger than the dead-letter topic takes; the original
	// is at its offset.
	HeaderDeadLetterValueOmitted = "canopy-dlq-value-omitted"
)

// Header returns the value of the last header named key, and whether there
// was one.
func Header(headers []kgo.RecordHeader, key string) (string, bool) {
	for i := len(headers) - 1; i >= 0; i-- {
		if headers[i].Key == key {
			return string(headers[i].Value), true
		}
	}
	return "", false
}

// EventRecord builds the structured-mode record of an event for topic: key =
// run id, the CloudEvents content type, and traceparent when given.
func EventRecord(topic string, e *Event, traceparent string) (*kgo.Record, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	v, err := e.MarshalJSON()
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic, Key: []byte(e.RunID), Value: v, Headers: []kgo.RecordHeader{
		{Key: HeaderContentType, Value: []byte(ContentTypeCloudEvents)},
	}}
	if traceparent != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderTraceParent, Value: []byte(traceparent)})
	}
	return r, nil
}

// HeaderCarrier adapts a record's headers to OpenTelemetry's TextMapCarrier
// (propagation.TraceContext{}.Inject and Extract), so W3C trace context
// crosses Kafka in traceparent and tracestate headers. Set replaces an
// existing header of the same key rather than adding a second one.
type HeaderCarrier struct{ Headers *[]kgo.RecordHeader }

// Get returns the last header named key, or "".
func (c HeaderCarrier) Get(key string) string {
	v, _ := Header(*c.Headers, key)
	return v
}

// Set sets header key to value.
func (c HeaderCarrier) Set(key, value string) {
	for i := range *c.Headers {
		if (*c.Headers)[i].Key == key {
			(*c.Headers)[i].Value = []byte(value)
			return
		}
	}
	*c.Headers = append(*c.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.Headers))
	for _, h := range *c.Headers {
		keys = append(keys, h.Key)
	}
	return keys
}
