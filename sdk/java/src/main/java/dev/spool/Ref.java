package dev.spool;

import dev.spool.v1.Delivery;
import dev.spool.v1.DeliveryRef;

/** Names one delivery when settling it: where it is and its fencing token. */
record Ref(String topic, int partition, long offset, long token) {
  static Ref of(Delivery d) {
    return new Ref(d.getTopic(), d.getPartition(), d.getOffset(), d.getFencingToken());
  }

  DeliveryRef proto() {
    return DeliveryRef.newBuilder().setTopic(topic).setPartition(partition).setOffset(offset).setFencingToken(token).build();
  }
}
