// Command producer publishes order-1 … order-N to topic "orders" through the
// sidecar at $SPOOL_ADDR, with its id as the message id and the key.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
)

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		log.Fatalf("usage: producer N: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := spool.Dial(ctx, "") // "" = $SPOOL_ADDR
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("order-%d", i)
		res, err := client.Publish(ctx, "orders", []byte(id), []byte("payload of "+id), spool.WithID(id))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("published %s partition %d offset %d\n", res.ID, res.Partition, res.Offset)
	}
}
