package dev.spool;

import dev.spool.v1.Ack;
import dev.spool.v1.Extend;
import dev.spool.v1.Nack;
import dev.spool.v1.Outcome;
import dev.spool.v1.SubscribeRequest;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * What a stream has yet to send: settlements, lease extensions and credit,
 * coalesced into one frame. Pure; its owner (a {@link Session}) guards it.
 *
 * <p>A settlement drops a pending extension of the same delivery: the sidecar
 * applies a frame's acks and nacks before its extends, so an extension
 * travelling in the frame of its delivery's settlement would be refused
 * (NOT_IN_FLIGHT) — and it is moot once the delivery is settled.
 */
final class Outbox {
  private record Settle(Ref ref, Settlement st) {}

  private final List<Settle> settles = new ArrayList<>();
  private final Set<Ref> extensions = new LinkedHashSet<>();
  private int credit;

  /** Queues a settlement; returnCredit adds one credit to the same frame. */
  void settle(Ref ref, Settlement st, boolean returnCredit) {
    extensions.remove(ref);
    settles.add(new Settle(ref, st));
    if (returnCredit) {
      credit++;
    }
  }

  /** Queues a lease extension (extend_by_ms 0: the visibility timeout from now); one per delivery per frame. */
  void extend(Ref ref) {
    extensions.add(ref);
  }

  void addCredit(int n) {
    credit += n;
  }

  /** Drops the credit not yet sent (the drain grants none). */
  void clearCredit() {
    credit = 0;
  }

  boolean isEmpty() {
    return settles.isEmpty() && extensions.isEmpty() && credit == 0;
  }

  int credit() {
    return credit;
  }

  /** The frame of everything queued; the outbox is empty afterwards. */
  SubscribeRequest take() {
    SubscribeRequest.Builder f = SubscribeRequest.newBuilder().setCredit(credit);
    for (Settle s : settles) {
      if (s.st.outcome() == Outcome.OUTCOME_ACK) {
        f.addAcks(Ack.newBuilder().setRef(s.ref.proto()));
      } else {
        f.addNacks(Nack.newBuilder()
            .setRef(s.ref.proto())
            .setOutcome(s.st.outcome())
            .setRetryAfterMs(s.st.retryAfterMs())
            .setReason(s.st.reason())
            .setError(s.st.error())
            .setDownstream(s.st.downstream()));
      }
    }
    for (Ref r : extensions) {
      f.addExtends(Extend.newBuilder().setRef(r.proto()).setExtendByMs(0));
    }
    settles.clear();
    extensions.clear();
    credit = 0;
    return f.build();
  }
}
