package shop;

import dev.spool.Client;
import dev.spool.Subscription;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;

/**
 * Handles topic "orders" in group "workers" through the sidecar at $SPOOL_ADDR until it has
 * handled N distinct messages, then drains and exits.
 */
public final class Worker {
  public static void main(String[] args) throws Exception {
    int n = Integer.parseInt(args[0]);
    System.out.println("spool jar " + Client.class.getProtectionDomain().getCodeSource().getLocation().getPath());
    Set<String> seen = ConcurrentHashMap.newKeySet();
    CountDownLatch all = new CountDownLatch(n);
    try (Client client = Client.connect();
        Subscription sub = client.subscribe("workers", List.of("orders"), m -> {
          if (seen.add(m.id())) {
            System.out.println("handled " + m.id() + " attempt " + m.attempt() + " on " + Thread.currentThread());
            all.countDown();
          }
        })) {
      all.await(); // leaving the block drains: this handler's ack is sent first
    }
    System.out.println("drained after " + seen.size() + " messages");
  }
}
