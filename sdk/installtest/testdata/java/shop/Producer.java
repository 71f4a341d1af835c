package shop;

import dev.spool.Client;
import dev.spool.OutMessage;
import dev.spool.PublishResult;

/** Publishes order-1 … order-N to topic "orders" through the sidecar at $SPOOL_ADDR. */
public final class Producer {
  public static void main(String[] args) {
    int n = Integer.parseInt(args[0]);
    try (Client client = Client.connect()) {
      for (int i = 1; i <= n; i++) {
        String id = "order-" + i;
        PublishResult r = client.publish("orders", OutMessage.of("payload of " + id).withId(id).withKey(id));
        System.out.println("published " + r.id() + " partition " + r.partition() + " offset " + r.offset());
      }
    }
  }
}
