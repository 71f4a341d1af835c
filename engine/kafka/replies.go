package kafka

import (
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultMaxReplyBytes bounds one reply of a broker: franz-go's own
// default, above the largest reply Spool asks for (a fetch of at most
// maxFetchBytes, plus the one record batch Kafka sends whole however
// large).
const DefaultMaxReplyBytes = 100 << 20

// franz-go reads a reply's 4-byte size and, when it is negative or above
// BrokerMaxReadBytes, closes the connection before allocating anything,
// with an error whose text says so (its sentinel is not exported). The
// text is held by TestKafkaHugeReplyDeclaredIsRefused: a franz-go that
// words it differently fails that test, not production.
const refusedReplyText = "response size"

// replyRefused says whether err is franz-go refusing a reply's size.
func replyRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), refusedReplyText) &&
		(strings.Contains(err.Error(), "invalid large") || strings.Contains(err.Error(), "invalid negative"))
}

// replyErr names the setting when err is a refused reply.
func (c *Config) replyErr(err error) error {
	if !replyRefused(err) {
		return err
	}
	return fmt.Errorf("%w (a broker's reply declared more than guards.kafka_max_reply_bytes, %d bytes: its connection was closed unread)", err, c.MaxReplyBytes)
}

// replyHook counts refused replies (Hooks.ReplyRefused).
type replyHook struct{ refused func() }

func (h replyHook) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if h.refused != nil && replyRefused(err) {
		h.refused()
	}
}
