package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/internal/testkafka"
)

// TestBackendKafka runs the delivery suite with spoold on Apache Kafka:
// one broker for all of it (a broker takes seconds to start), each test
// under a topic and group prefix of its own; then groups shared across
// sidecars through Kafka consumer groups (kafka_groups_test.go), and a
// broker restart under load on the same broker.
func TestBackendKafka(t *testing.T) {
	brk := testkafka.Start(t)
	kafka := backend{name: "kafka", storage: func(t *testing.T) string { return kafkaStorage(t, brk) }}
	for _, s := range deliverySuite {
		t.Run(s.name, func(t *testing.T) { s.run(t, kafka) })
	}
	t.Run("foreign_binary_records", func(t *testing.T) { testForeignBinaryRecords(t, kafka, writeKafkaRecords(brk)) })
	t.Run("kafka_tools_see_positions", func(t *testing.T) { testKafkaToolsSeePositions(t, kafka, brk) })
	t.Run("shared_group_rebalance", func(t *testing.T) { testKafkaGroupRebalance(t, brk) })
	t.Run("shared_group_slow_handler", func(t *testing.T) { testKafkaGroupSlowHandler(t, brk) })
	t.Run("broker_restart", func(t *testing.T) {
		testBrokerRestartUnderLoad(t, kafkaStorage(t, brk), func() {
			brk.Stop()
			if err := brk.Start(); err != nil {
				t.Fatal(err)
			}
		})
	})
}

var notKafkaName = regexp.MustCompile(`[^a-zA-Z0-9._-]`)

// kafkaStorage is the storage section of a test's spoold on the broker:
// a prefix from the test's name keeps its topics and groups apart from
// the other tests' on the shared broker.
func kafkaStorage(t *testing.T, brk *testkafka.Broker) string {
	return fmt.Sprintf("storage:\n  backend: kafka\n  kafka:\n    brokers: [%q]\n    prefix: %q\n    create_topics: true\n", brk.Addr(), kafkaPrefix(t))
}

// kafkaPrefix is a test's prefix of Kafka topics and groups.
func kafkaPrefix(t *testing.T) string { return notKafkaName.ReplaceAllString(t.Name(), "_") + "." }

// The messages are in Kafka and the group's positions are Kafka committed
// offsets: once spoold has delivered everything, the Kafka topic holds
// every message and the Kafka group <prefix>workers has committed each
// partition's end, so Kafka's own tools (kafka-consumer-groups
// --describe) show the lag spoold shows, 0.
func testKafkaToolsSeePositions(t *testing.T, b backend, brk *testkafka.Broker) {
	n := b.startNode(t, config("10s", "key"))
	ids := publishSeq(t, n.client(context.Background()), "orders", 0, 400, func(s int) string { return fmt.Sprintf("k%d", s%13) })
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "8")
	eventually(t, 60*time.Second, "every message completed", func() bool { return len(doneCounts(readEvents(t, rec))) == len(ids) })
	a := n.adminClient()
	eventually(t, 10*time.Second, "spoold shows lag 0", func() bool { return groupLag(t, a, "workers") == 0 })

	cl, err := kgo.NewClient(kgo.SeedBrokers(brk.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := kafkaPrefix(t)
	ends, err := adm.ListEndOffsets(ctx, prefix+"orders")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(len(ids)) {
		t.Fatalf("Kafka topic %sorders holds %d messages, want the %d published", prefix, total, len(ids))
	}
	// spoold commits every node.commit_interval: Kafka sees the end soon after.
	eventually(t, 10*time.Second, "Kafka's group committed every partition's end", func() bool {
		committed, err := adm.FetchOffsets(ctx, prefix+"workers")
		if err != nil {
			t.Fatal(err)
		}
		all := true
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(o.Topic, o.Partition)
			all = all && ok && c.At == o.Offset
		})
		return all
	})
}
