// Deliveries as an async iterator (`for await`), beside the handler form.
//
// It is the handler form underneath: the handler given to the subscription
// hands each message to the iterator and waits until the application settles
// it (m.ack(), m.nack(...)). So credit, lease extension (a message is
// extended until it is settled), reconnects and the drain are the same. What
// the application has not settled when it leaves the loop is released:
// delivered again, no attempt counted.
import type { Sidecar } from "./types";
import type { Message } from "./message";
import { DeadLetter, Release, Retry, RetryDownstream } from "./outcome";
import { subscribeWith, type SubscribeOptions } from "./subscribe";

/** A message from `client.messages()`: settle it with ack() or nack(). */
export interface ReceivedMessage extends Message {
  /** Done: never delivered to this group again. */
  ack(): void;
  /** Not done: a retry after the backoff by default, or the outcome given. */
  nack(outcome?: Retry | RetryDownstream | DeadLetter | Release): void;
  /** Aborts when the delivery's lease is lost (the stream broke): stop working on it. */
  readonly signal: AbortSignal;
}

/** The options of `subscribe` but the handler. */
export type MessagesOptions = Omit<SubscribeOptions, "handler">;

interface Held {
  m: ReceivedMessage;
  settled: boolean;
  settle(outcome: unknown): void;
}

/**
 * `for await (const m of client.messages({ group, topics })) { ...; m.ack(); }`
 *
 * Up to `concurrency` messages are out unsettled at once (settle them from
 * other tasks to work on several); `prefetch` more wait received. The loop
 * ends when `signal` aborts (or on a `shutdownSignals` signal); `break`,
 * `return` or a throw in the loop, `close()` and `await using` drain:
 * messages not settled are released. A subscription the sidecar refuses for
 * good (unknown group ...) throws from the loop.
 */
export class Subscription implements AsyncIterableIterator<ReceivedMessage>, AsyncDisposable {
  private ready: Held[] = []; // received, not handed out
  private readonly out = new Set<Held>(); // handed out, not settled
  private wake: (() => void) | undefined;
  private closing = false; // hand out no more
  private exiting = false; // the application left the loop
  private draining = false;
  private finished = false;
  private err: unknown;
  private errThrown = false;
  private readonly stop = new AbortController();
  private readonly run: Promise<void>;

  constructor(client: Sidecar, opts: MessagesOptions) {
    const external = opts.signal;
    if (external?.aborted) this.stop.abort();
    else external?.addEventListener("abort", () => this.stop.abort(), { once: true });
    this.stop.signal.addEventListener("abort", () => this.closeQueue(), { once: true });
    this.run = subscribeWith(client, { ...opts, signal: this.stop.signal, handler: (m, signal) => this.handle(m, signal) }, () => this.onDrain());
    this.run.then(
      () => this.end(undefined),
      (e: unknown) => this.end(e ?? new Error("spool: subscription failed")),
    );
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(): Promise<IteratorResult<ReceivedMessage, undefined>> {
    for (;;) {
      if (this.err !== undefined && !this.errThrown) {
        this.errThrown = true;
        throw this.err;
      }
      // Stopped by the application: done at once. Closing for another reason
      // (a refusal, a process signal): done when the subscription has ended,
      // so that its error, if any, is thrown here.
      if (this.finished || (this.closing && this.stop.signal.aborted)) return { done: true, value: undefined };
      const h = this.closing ? undefined : this.ready.shift();
      if (h === undefined) {
        await new Promise<void>((r) => (this.wake = r));
        continue;
      }
      if (h.settled) continue; // its lease was lost meanwhile: the sidecar took it back
      this.out.add(h);
      return { done: false, value: h.m };
    }
  }

  /** Called by `break` in a for await loop: see close(). */
  async return(): Promise<IteratorResult<ReceivedMessage, undefined>> {
    await this.close();
    return { done: true, value: undefined };
  }

  /** Stops: drains, releasing the messages not settled, and resolves when the subscription has ended. */
  async close(): Promise<void> {
    this.exiting = true;
    // Released once the drain grants no more credit (onDrain): a release
    // sent before would hand the message straight back to this subscription.
    if (this.draining) this.releaseOut();
    this.stop.abort();
    try {
      await this.run;
    } catch (e) {
      if (!this.errThrown) {
        this.errThrown = true;
        throw e;
      }
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private handle(m: Message, signal: AbortSignal): Promise<void> {
    if (this.closing) throw new Release("released: the subscription is closing");
    return new Promise<void>((resolve, reject) => {
      const h: Held = {
        m: undefined as unknown as ReceivedMessage,
        settled: false,
        settle: (outcome: unknown) => {
          if (h.settled) return; // settled already, or the lease was lost
          h.settled = true;
          this.out.delete(h);
          if (outcome === undefined) resolve();
          else reject(outcome);
        },
      };
      h.m = Object.assign(m, {
        ack: () => h.settle(undefined),
        nack: (outcome?: Retry | RetryDownstream | DeadLetter | Release) => {
          if (outcome !== undefined && !(outcome instanceof Retry || outcome instanceof DeadLetter || outcome instanceof Release)) {
            throw new TypeError("spool: nack: pass a Retry, RetryDownstream, DeadLetter or Release");
          }
          h.settle(outcome ?? new Error("nacked"));
        },
        signal,
      });
      signal.addEventListener("abort", () => h.settle(new Release("the lease was lost")), { once: true });
      this.ready.push(h);
      this.poke();
    });
  }

  private onDrain(): void {
    this.draining = true;
    this.closeQueue();
    if (this.exiting) this.releaseOut();
  }

  private releaseOut(): void {
    for (const h of [...this.out]) h.settle(new Release("released: not settled when the loop ended"));
  }

  /** No more messages out: those waiting are released. */
  private closeQueue(): void {
    this.closing = true;
    for (const h of this.ready.splice(0)) h.settle(new Release("released: the subscription is closing"));
    this.poke();
  }

  private end(err: unknown): void {
    this.finished = true;
    this.err = err;
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}
