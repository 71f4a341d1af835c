package dev.spool;

import dev.spool.v1.PublishStreamRequest;
import dev.spool.v1.PublishStreamResponse;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Pipelines publishes to one topic over a PublishStream: {@link #publish}
 * returns at once with a future, and messages queued meanwhile go together in
 * the next request (at most 1,000 messages or 1 MiB, one acks per request).
 * The number of unconfirmed messages is bounded ({@link
 * PublisherOptions#maxInFlight()}): publish blocks while the window is full.
 * Thread-safe. Close it when done.
 *
 * <p>A request the sidecar refuses fails only its messages, with a typed
 * {@link SpoolException} (in-band error); the stream stays open. If the
 * stream breaks, the unconfirmed messages fail (they may or may not be
 * stored: publish them again with the same id) and the next publish opens a
 * new stream.
 *
 * <p>The futures complete on gRPC's callback thread: keep dependent actions
 * short, or use the {@code ...Async} methods of CompletableFuture.
 */
public final class Publisher implements AutoCloseable {
  static final int MAX_BATCH_MESSAGES = 1000; // per request (the sidecar's limit: 10,000)
  static final int MAX_BATCH_BYTES = 1 << 20; // key + payload per request, below gRPC's 4 MiB default

  private record Item(OutMessage m, Acks acks, CompletableFuture<PublishResult> f) {}

  /** One PublishStream with the requests awaiting an answer. Fields guarded by Publisher.mu. */
  private final class Stream implements ClientResponseObserver<PublishStreamRequest, PublishStreamResponse> {
    ClientCallStreamObserver<PublishStreamRequest> out; // the sender thread's only
    final Map<Long, List<CompletableFuture<PublishResult>>> waiting = new HashMap<>();
    boolean broken;

    @Override
    public void beforeStart(ClientCallStreamObserver<PublishStreamRequest> requestStream) {
      out = requestStream;
    }

    @Override
    public void onNext(PublishStreamResponse resp) {
      List<CompletableFuture<PublishResult>> futs;
      mu.lock();
      try {
        futs = waiting.remove(resp.getSequence());
      } finally {
        mu.unlock();
      }
      if (futs == null) {
        return;
      }
      if (resp.hasError()) {
        dev.spool.v1.Error e = resp.getError();
        Status.Code code = Status.fromCodeValue(e.getCode()).getCode();
        SpoolException err = Errors.make("spool: publish to \"" + topic + "\": the sidecar refused it (" + e.getReason() + "): " + e.getMessage(),
            code, e.getReason(), e.getMessage(), Map.of(), null);
        for (CompletableFuture<PublishResult> f : futs) {
          complete(f, null, err);
        }
        return;
      }
      for (int i = 0; i < futs.size(); i++) {
        if (i >= resp.getResultsCount()) {
          complete(futs.get(i), null, new SpoolException("spool: publish to \"" + topic + "\": the sidecar answered " + resp.getResultsCount()
              + " results for " + futs.size() + " messages: upgrade the sidecar and SDK together", Status.Code.INTERNAL));
          continue;
        }
        complete(futs.get(i), PublishResult.of(resp.getResults(i)), null);
      }
    }

    @Override
    public void onError(Throwable t) {
      client.publishFailed();
      breakStream(this, t);
    }

    @Override
    public void onCompleted() {
      breakStream(this, new IllegalStateException("the sidecar ended the stream"));
    }
  }

  private final Client client;
  private final String topic;
  private final PublisherOptions opts;
  private final Semaphore window;
  // Futures taken a window slot for and not completed yet: a slot is freed
  // before its future completes (a callback of the future may publish
  // again), so close waits for this to reach 0 once the window drained.
  private final java.util.concurrent.atomic.AtomicLong unsettled = new java.util.concurrent.atomic.AtomicLong();
  private final Thread sender;

  private final ReentrantLock mu = new ReentrantLock();
  private final Condition wake = mu.newCondition();
  // Guarded by mu:
  private final ArrayDeque<Item> queue = new ArrayDeque<>();
  private boolean closed; // no more publishes
  private boolean finishing; // the sender ends the stream and exits
  private boolean cancelStream; // ... by cancelling it (close timed out)
  private Stream stream;
  private long seq;

  Publisher(Client client, String topic, PublisherOptions opts) {
    this.client = client;
    this.topic = topic;
    this.opts = opts;
    this.window = new Semaphore(opts.maxInFlight());
    this.sender = HandlerThreads.daemonFactory("spool-publisher-" + topic + "-").newThread(this::sendLoop);
    sender.start();
  }

  /** {@link #publish(OutMessage, Acks)} with Acks.ALL. */
  public CompletableFuture<PublishResult> publish(OutMessage m) {
    return publish(m, Acks.ALL);
  }

  /**
   * Queues a message and returns its future: the result once the message is
   * durable, or a {@link SpoolException}. Blocks while the window of
   * unconfirmed messages is full.
   */
  public CompletableFuture<PublishResult> publish(OutMessage m, Acks acks) {
    CompletableFuture<PublishResult> f = new CompletableFuture<>();
    if (topic == null || topic.isEmpty()) {
      f.completeExceptionally(new IllegalArgumentException("spool: publisher: topic is empty: name the topic to publish to"));
      return f;
    }
    // The caller's context, taken here: the message is sent from another thread.
    OutMessage traced = m.withTraceContext(io.opentelemetry.context.Context.current());
    try {
      window.acquire();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      f.completeExceptionally(new SpoolException("spool: publish to \"" + topic + "\": interrupted while the window was full; the message was not sent", Status.Code.CANCELLED));
      return f;
    }
    unsettled.incrementAndGet();
    mu.lock();
    try {
      if (!closed) {
        queue.add(new Item(traced, acks, f));
        wake.signal();
        return f;
      }
    } finally {
      mu.unlock();
    }
    complete(f, null, new SpoolException("spool: publish to \"" + topic + "\": publisher closed; the message was not sent", Status.Code.CANCELLED));
    return f;
  }

  /** Settles a future and frees its window slot. */
  private void complete(CompletableFuture<PublishResult> f, PublishResult r, Throwable err) {
    window.release();
    try {
      if (err != null) {
        f.completeExceptionally(err);
      } else {
        f.complete(r);
      }
    } finally {
      unsettled.decrementAndGet();
    }
  }

  /**
   * Waits for the unconfirmed messages (at most the close timeout), then ends
   * the stream. Messages still unconfirmed then fail, and close throws a
   * {@link SpoolException} saying how many.
   */
  @Override
  public void close() {
    mu.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      wake.signal();
    } finally {
      mu.unlock();
    }
    boolean drained = false;
    long deadline = System.nanoTime() + opts.closeTimeout().toNanos();
    try {
      drained = window.tryAcquire(opts.maxInFlight(), opts.closeTimeout().toNanos(), TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    // Every slot is free; the last futures may still be completing (their
    // slot is freed first): close returns once every future is done.
    while (drained && unsettled.get() > 0 && System.nanoTime() < deadline) {
      java.util.concurrent.locks.LockSupport.parkNanos(100_000);
    }
    int unconfirmed = drained ? 0 : opts.maxInFlight() - window.availablePermits();
    mu.lock();
    try {
      finishing = true;
      cancelStream = !drained;
      wake.signal();
    } finally {
      mu.unlock();
    }
    boolean interrupted = false;
    while (sender.isAlive()) {
      try {
        sender.join();
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
    if (drained) {
      window.release(opts.maxInFlight());
      return;
    }
    // What is still queued fails here; requests on the stream the sender
    // cancelled fail through its onError.
    failQueued(new SpoolException("spool: publish to \"" + topic + "\": publisher closed before the message was sent", Status.Code.CANCELLED));
    throw new SpoolException("spool: publisher to \"" + topic + "\": " + unconfirmed + " messages unconfirmed after the close timeout (" + opts.closeTimeout().toMillis()
        + " ms); they failed and may or may not be stored: publish them again with the same ids, or raise PublisherOptions.closeTimeout", Status.Code.DEADLINE_EXCEEDED);
  }

  /** Sends what is queued, one request per batch, opening a stream when needed; ends the stream at close. */
  private void sendLoop() {
    while (true) {
      List<Item> batch = new ArrayList<>();
      Stream st;
      boolean finish;
      boolean cancel;
      mu.lock();
      try {
        while (queue.isEmpty() && !finishing) {
          wake.awaitUninterruptibly();
        }
        finish = finishing;
        cancel = cancelStream;
        st = stream;
        if (finish) {
          stream = null;
        } else {
          int size = 0;
          while (!queue.isEmpty() && batch.size() < MAX_BATCH_MESSAGES) {
            Item it = queue.peek();
            int sz = it.m.size();
            if (!batch.isEmpty() && (size + sz > MAX_BATCH_BYTES || it.acks != batch.get(0).acks)) {
              break; // one acks per request
            }
            size += sz;
            batch.add(queue.poll());
          }
        }
      } finally {
        mu.unlock();
      }
      if (finish) {
        if (st != null && st.out != null) {
          try {
            if (cancel) {
              st.out.cancel("spool: publisher closed", null);
            } else {
              st.out.onCompleted();
            }
          } catch (RuntimeException e) {
            // the stream is gone already
          }
        }
        return;
      }
      sendBatch(st, batch);
    }
  }

  private void sendBatch(Stream st, List<Item> batch) {
    if (st == null) {
      st = new Stream();
      try {
        client.publisherStub().publishStream(st);
      } catch (RuntimeException e) {
        client.publishFailed();
        SpoolException err = Errors.wrap("spool: publish to \"" + topic + "\"", e, client.addr(), Errors.Op.PUBLISH);
        for (Item it : batch) {
          complete(it.f, null, err);
        }
        return;
      }
      mu.lock();
      try {
        stream = st;
      } finally {
        mu.unlock();
      }
    }
    PublishStreamRequest.Builder req = PublishStreamRequest.newBuilder().setTopic(topic).setAcks(batch.get(0).acks.proto());
    List<CompletableFuture<PublishResult>> futs = new ArrayList<>(batch.size());
    for (Item it : batch) {
      req.addMessages(it.m.toProto());
      futs.add(it.f);
    }
    mu.lock();
    try {
      if (st.broken) {
        st = null;
      } else {
        seq++;
        req.setSequence(seq);
        st.waiting.put(seq, futs);
      }
    } finally {
      mu.unlock();
    }
    if (st == null) {
      sendBatch(null, batch); // it broke meanwhile: a new stream
      return;
    }
    try {
      st.out.onNext(req.build());
    } catch (RuntimeException e) {
      breakStream(st, e);
    }
  }

  /** Fails every request waiting on st; the next batch opens a new stream. */
  private void breakStream(Stream st, Throwable cause) {
    Map<Long, List<CompletableFuture<PublishResult>>> waiting;
    boolean closing;
    mu.lock();
    try {
      if (st.broken) {
        return;
      }
      st.broken = true;
      if (stream == st) {
        stream = null;
      }
      waiting = new HashMap<>(st.waiting);
      st.waiting.clear();
      closing = finishing;
    } finally {
      mu.unlock();
    }
    SpoolException err;
    if (closing) {
      err = new SpoolException("spool: publish to \"" + topic + "\": publisher closed before the sidecar answered; the message may or may not be stored: publish it again with the same id",
          Status.Code.CANCELLED);
    } else {
      SpoolException w = Errors.wrap("spool: publish to \"" + topic + "\"", cause, client.addr(), Errors.Op.PUBLISH);
      err = Errors.make("spool: publish to \"" + topic + "\": stream to the sidecar broke: " + w.getMessage()
          + ": the message may or may not be stored; publish it again with the same id", w.code(), w.reason(), w.details(), w.metadata(), cause);
    }
    for (List<CompletableFuture<PublishResult>> futs : waiting.values()) {
      for (CompletableFuture<PublishResult> f : futs) {
        complete(f, null, err);
      }
    }
  }

  /** Fails what is queued and not yet sent. */
  private void failQueued(SpoolException err) {
    List<CompletableFuture<PublishResult>> left = new ArrayList<>();
    mu.lock();
    try {
      for (Item it : queue) {
        left.add(it.f);
      }
      queue.clear();
    } finally {
      mu.unlock();
    }
    for (CompletableFuture<PublishResult> f : left) {
      complete(f, null, err);
    }
  }
}
