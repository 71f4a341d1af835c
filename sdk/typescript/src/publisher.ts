// Publisher: pipelined publishes to one topic over a PublishStream.
import { status as Status, type ClientDuplexStream } from "@grpc/grpc-js";

import { acksProto, resultOf, toPublishMessage, type Acks, type OutMessage, type PublishResult, type Sidecar } from "./types";
import { SpoolError, makeError, wrapError } from "./errors";
import type { PublishMessage } from "./proto";
import type { PublishStreamRequest } from "./gen/spool/v1/PublishStreamRequest";
import type { PublishStreamResponse__Output } from "./gen/spool/v1/PublishStreamResponse";

export interface PublisherOptions {
  /** Messages published and not yet confirmed, queued ones included (default 1024): publish waits while this many are pending. */
  maxInFlight?: number;
  /** How long close() waits for unconfirmed messages (default 30 s). */
  closeTimeoutMs?: number;
}

const MAX_BATCH_MESSAGES = 1000; // per request (the sidecar's limit is 10,000)
const MAX_BATCH_BYTES = 1 << 20; // key + payload bytes per request

interface Item {
  m: PublishMessage & { key: Buffer; payload: Buffer };
  acks: Acks | undefined;
  resolve: (r: PublishResult) => void;
  reject: (e: Error) => void;
}

interface Stream {
  call: ClientDuplexStream<PublishStreamRequest, PublishStreamResponse__Output>;
  waiting: Map<number, Item[]>;
  broken: boolean;
}

/** A message taken by Publisher.publish. */
export interface Published {
  /**
   * Resolves once the message is durable, rejects with a SpoolError
   * otherwise. Await it or attach a handler: a rejection nobody handles does
   * not end the process (the Publisher handles it), but is then unseen.
   */
  readonly result: Promise<PublishResult>;
}

/**
 * Pipelines publishes to one topic:
 *
 *     const { result } = await p.publish(msg); // waits only while maxInFlight are pending
 *
 * Messages queued meanwhile are sent together in one request (at most 1,000
 * messages or 1 MiB), so a loop that awaits each publish (not each result)
 * keeps up to maxInFlight on the wire, and memory bounded.
 *
 * If the stream breaks, the unconfirmed messages fail (they may or may not be
 * stored: publish them again with the same id) and the next publish opens a
 * new stream.
 */
export class Publisher {
  private readonly maxInFlight: number;
  private readonly closeTimeoutMs: number;
  private queue: Item[] = [];
  private sent = 0; // messages on the wire, unanswered
  private seq = 0;
  private stream: Stream | undefined;
  private closed = false;
  private scheduled = false;
  private waiters: (() => void)[] = [];

  constructor(private readonly client: Sidecar, readonly topic: string, opts: PublisherOptions = {}) {
    this.maxInFlight = Math.max(1, Math.floor(opts.maxInFlight ?? 1024));
    this.closeTimeoutMs = Math.max(0, opts.closeTimeoutMs ?? 30_000);
  }

  /** Messages published and not yet answered (queued or on the wire). */
  get pending(): number {
    return this.queue.length + this.sent;
  }

  /** Resolves once fewer than maxInFlight messages are pending. */
  capacity(): Promise<void> {
    if (this.pending < this.maxInFlight || this.closed) return Promise.resolve();
    return new Promise((r) => this.waiters.push(r));
  }

  /**
   * Waits while maxInFlight messages are pending, then queues the message and
   * resolves with its `result`, which resolves once the message is durable.
   * Rejects at once for an invalid call or a closed publisher.
   */
  async publish(msg: OutMessage, opts: { acks?: Acks } = {}): Promise<Published> {
    if (!this.topic) throw new TypeError("spool: publisher: topic is empty: name the topic to publish to");
    const m = toPublishMessage(msg);
    while (this.pending >= this.maxInFlight && !this.closed) await this.capacity();
    if (this.closed) throw new SpoolError(`spool: publish to "${this.topic}": publisher closed`, { code: Status.CANCELLED });
    const result = new Promise<PublishResult>((resolve, reject) => {
      this.queue.push({ m, acks: opts.acks, resolve, reject });
    });
    result.catch(() => {}); // handled here too: an unawaited failure must not end the process
    this.schedule();
    return { result };
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Waits for unconfirmed messages (at most closeTimeoutMs), then closes the
   * stream. Messages still unconfirmed then fail, and close rejects saying how many.
   */
  async close(): Promise<void> {
    this.closed = true;
    this.wakeWaiters();
    const deadline = Date.now() + this.closeTimeoutMs;
    while (this.pending > 0 && Date.now() < deadline) {
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(0, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    const left = this.pending;
    const err = new SpoolError(
      `spool: publisher to "${this.topic}": ${left} messages unconfirmed after the close timeout (${this.closeTimeoutMs} ms); they failed and may or may not be stored: publish them again with the same id, or raise closeTimeoutMs`,
      { code: Status.DEADLINE_EXCEEDED });
    for (const it of this.queue.splice(0)) it.reject(err);
    const st = this.stream;
    if (st) {
      this.breakStream(st, err);
      st.call.end();
    }
    if (left > 0) throw err;
  }

  private wakeWaiters(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.sendQueued();
    });
  }

  private sendQueued(): void {
    while (this.queue.length > 0 && this.sent < this.maxInFlight) {
      const room = Math.min(MAX_BATCH_MESSAGES, this.maxInFlight - this.sent);
      let n = 0;
      let size = 0;
      const acks = this.queue[0]!.acks;
      while (n < this.queue.length && n < room) {
        const it = this.queue[n]!;
        const sz = it.m.key.length + it.m.payload.length;
        if (n > 0 && (size + sz > MAX_BATCH_BYTES || it.acks !== acks)) break; // one acks per request
        size += sz;
        n++;
      }
      const batch = this.queue.splice(0, n);
      this.send(batch, acks);
    }
  }

  private send(batch: Item[], acks: Acks | undefined): void {
    const st = this.stream ?? this.open();
    const seq = ++this.seq;
    st.waiting.set(seq, batch);
    this.sent += batch.length;
    st.call.write({ sequence: seq, topic: this.topic, messages: batch.map((b) => b.m), acks: acksProto(acks) });
  }

  private open(): Stream {
    const call = this.client.pub.publishStream();
    const st: Stream = { call, waiting: new Map(), broken: false };
    call.on("data", (resp: PublishStreamResponse__Output) => this.onAnswer(st, resp));
    call.on("error", (err) => this.breakStream(st, wrapError(`spool: publish to "${this.topic}": stream to the sidecar broke`, err, this.client.addr, "publish")));
    call.on("status", (s) => {
      if (s.code === Status.OK) this.breakStream(st, new SpoolError(`spool: publish to "${this.topic}": the sidecar ended the stream before answering: the message may or may not be stored; publish it again with the same id`, { code: Status.UNAVAILABLE }));
    });
    this.stream = st;
    return st;
  }

  private onAnswer(st: Stream, resp: PublishStreamResponse__Output): void {
    const seq = Number(resp.sequence);
    const batch = st.waiting.get(seq);
    if (!batch) return;
    st.waiting.delete(seq);
    this.done(batch.length);
    const e = resp.error;
    if (e) {
      const err = makeError(`spool: publish to "${this.topic}": the sidecar refused it (${e.reason}): ${e.message}`, e.code as Status, e.reason, e.message);
      for (const it of batch) it.reject(err);
      return;
    }
    const rs = resp.results;
    batch.forEach((it, i) => {
      const r = rs[i];
      if (r) it.resolve(resultOf(r));
      else it.reject(new Error(`spool: publish to "${this.topic}": the sidecar answered ${rs.length} results for ${batch.length} messages: upgrade the sidecar and SDK together`));
    });
  }

  private done(n: number): void {
    this.sent -= n;
    if (this.queue.length > 0) this.schedule();
    if (this.pending < this.maxInFlight || this.pending === 0) this.wakeWaiters();
  }

  /** Fails every request waiting on st; the next batch opens a new stream. */
  private breakStream(st: Stream, err: Error): void {
    if (st.broken) return;
    st.broken = true;
    if (this.stream === st) this.stream = undefined;
    const waiting = [...st.waiting.values()];
    st.waiting.clear();
    st.call.cancel();
    const e = err instanceof SpoolError && /may or may not be stored/.test(err.message)
      ? err
      : Object.assign(err, { message: `${err.message}: the message may or may not be stored; publish it again with the same id` });
    for (const batch of waiting) {
      this.done(batch.length);
      for (const it of batch) it.reject(e);
    }
  }
}
