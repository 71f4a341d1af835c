// Subscribe: the protocol of SubscriberService on behalf of a handler.
//
// One Subscriber per subscribe() call owns the concurrency bound and the
// queue of deliveries received but not started; it outlives the streams
// (Sessions) it opens one after the other when a stream breaks. Everything
// runs on Node's event loop: no locks, and a Session coalesces whatever is
// queued during one turn of the loop (settlements, extensions, credit) into
// one frame.
import { status as Status, type ClientDuplexStream } from "@grpc/grpc-js";
import type { TracerProvider } from "@opentelemetry/api";

import { backoffDelay, sleep, type Backoff } from "./backoff";
import type { Sidecar } from "./types";
import { SpoolError, frameTooLarge, grpcCode, sidecarUnreachable, wrapError } from "./errors";
import { consoleLogger, type Logger } from "./log";
import { messageOf, type Message } from "./message";
import { errorText, settlementFor, type Settlement } from "./outcome";
import type { Delivery, DeliveryRef, SubscribeRequest, SubscribeResponse } from "./proto";
import { HandlerTracer } from "./trace";

/**
 * Processes one message. Returning normally acknowledges it; throwing
 * `Retry`, `RetryDownstream`, `DeadLetter` or `Release` settles it so; any
 * other throw retries it with the error's message. `signal` aborts when the
 * delivery's lease is lost (the stream broke) or the drain timeout passes: the
 * handler should then stop.
 */
export type Handler = (m: Message, signal: AbortSignal) => Promise<void> | void;

/** Counters of what a subscription did; read them at any time. */
export class Stats {
  delivered = 0; // deliveries received
  acked = 0;
  retried = 0; // RETRY (thrown errors)
  deadLettered = 0;
  released = 0; // handed back unstarted (drain, excess, Release)
  dropped = 0; // settlements dropped because their stream broke
  extended = 0; // lease extensions sent
  settleErrors = 0; // settlements the sidecar rejected
  reconnects = 0; // streams opened after the first
}

export interface SubscribeOptions {
  /** Consumer group declared in the sidecar's subscriptions. */
  group: string;
  /** Topics to consume; empty or absent means every topic of the group. */
  topics?: string[];
  handler: Handler;
  /** Handlers running at once (default 64). */
  concurrency?: number;
  /** Deliveries received ahead, beyond those running (default = concurrency; 0 = none). */
  prefetch?: number;
  /** Name in the sidecar's logs and metrics, e.g. the pod name. */
  consumerName?: string;
  /** Recorded in dead-letter entries. */
  appVersion?: string;
  /** How long the drain waits for running handlers (default 30 s). */
  drainTimeoutMs?: number;
  /** Reconnect delay, exponential with full jitter (default 100 ms .. 5 s). */
  reconnectBackoff?: Backoff;
  /** Stops the subscription: it drains, then subscribe resolves. */
  signal?: AbortSignal;
  /**
   * Process signals that stop the subscription, e.g. ["SIGTERM", "SIGINT"]
   * (default none: signals are the application's; stop it with `signal`).
   * Listeners are removed when subscribe ends.
   */
  shutdownSignals?: NodeJS.Signals[];
  logger?: Logger;
  stats?: Stats;
  /**
   * Where the handler spans go (default: the global OpenTelemetry tracer
   * provider, which follows a provider registered later). See "Tracing" in
   * docs/sdk-typescript.md.
   */
  tracerProvider?: TracerProvider;
}

const MAX_CONCURRENCY = 1 << 16;
const MAX_CREDIT = 1 << 20;
const MIN_EXTEND_EVERY_MS = 5;
const ABANDON_AFTER_CANCEL_MS = 1000;
const CLOSE_STREAM_TIMEOUT_MS = 5000;

interface Config {
  group: string;
  topics: string[];
  handler: Handler;
  concurrency: number;
  prefetch: number;
  consumerName: string;
  appVersion: string;
  drainTimeoutMs: number;
  backoff: Backoff;
  shutdownSignals: NodeJS.Signals[];
  logger: Logger;
  stats: Stats;
  tracer: HandlerTracer;
  /** Called when the drain begins, once no more credit is granted. */
  onDrain: (() => void) | undefined;
}

function validate(o: SubscribeOptions, onDrain?: () => void): Config {
  if (!o || !o.group) throw new TypeError("spool: subscribe: group is empty: name the consumer group declared in the sidecar's subscriptions");
  if (typeof o.handler !== "function") throw new TypeError("spool: subscribe: handler is not a function: pass async (message, signal) => { ... }");
  const concurrency = o.concurrency ?? 64;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_CONCURRENCY) {
    throw new RangeError(`spool: subscribe: concurrency ${concurrency}: use an integer in 1..${MAX_CONCURRENCY}`);
  }
  const prefetch = Math.max(0, Math.floor(o.prefetch ?? concurrency));
  if (concurrency + prefetch > MAX_CREDIT) throw new RangeError(`spool: subscribe: prefetch ${prefetch}: concurrency + prefetch must be at most ${MAX_CREDIT}`);
  const drainTimeoutMs = o.drainTimeoutMs ?? 30_000;
  if (!(drainTimeoutMs >= 0)) throw new RangeError(`spool: subscribe: drainTimeoutMs ${drainTimeoutMs}: use 0 (do not wait) or a positive number`);
  const backoff = o.reconnectBackoff ?? { baseMs: 100, maxMs: 5000 };
  if (!(backoff.baseMs > 0) || !(backoff.maxMs >= backoff.baseMs)) {
    throw new RangeError(`spool: subscribe: reconnectBackoff {baseMs: ${backoff.baseMs}, maxMs: ${backoff.maxMs}}: base must be positive and max at least base`);
  }
  return {
    group: o.group, topics: o.topics ?? [], handler: o.handler, concurrency, prefetch,
    consumerName: o.consumerName ?? "", appVersion: o.appVersion ?? "", drainTimeoutMs, backoff,
    shutdownSignals: o.shutdownSignals ?? [],
    logger: o.logger ?? consoleLogger, stats: o.stats ?? new Stats(), tracer: new HandlerTracer(o.tracerProvider), onDrain,
  };
}

/**
 * Whether a stream error will not go away by reconnecting: a refusal of the
 * request itself. Transport failures, sidecar restarts, overload and
 * cancellation are retried.
 */
export function permanent(err: unknown): boolean {
  switch (grpcCode(err)) {
    case Status.INVALID_ARGUMENT:
    case Status.NOT_FOUND:
    case Status.PERMISSION_DENIED:
    case Status.UNAUTHENTICATED:
    case Status.FAILED_PRECONDITION:
    case Status.UNIMPLEMENTED:
      return true;
    default:
      return false;
  }
}

/** The subscription on client; onDrain is called when its drain begins (no more credit granted). */
export function subscribeWith(client: Sidecar, opts: SubscribeOptions, onDrain?: () => void): Promise<void> {
  const cfg = validate(opts, onDrain);
  return new Subscriber(client, cfg).run(opts.signal);
}

interface WorkItem {
  s: Session;
  d: Delivery;
  /** Extends the delivery's lease from its receipt: while it waits for a worker too. */
  lease: LeaseKeeper;
}

class Subscriber {
  private readonly queue: WorkItem[] = []; // received, not started
  private qHead = 0;
  private running = 0;
  draining = false;
  private idle: (() => void)[] = []; // resolved when running reaches 0
  private readonly log: Logger;
  readonly stats: Stats;

  constructor(readonly client: Sidecar, readonly cfg: Config) {
    this.log = cfg.logger;
    this.stats = cfg.stats;
  }

  get credit(): number {
    return this.cfg.concurrency + this.cfg.prefetch;
  }

  async run(external?: AbortSignal): Promise<void> {
    const stop = new AbortController();
    const onStop = () => stop.abort();
    if (external?.aborted) stop.abort();
    external?.addEventListener("abort", onStop, { once: true });
    for (const sig of this.cfg.shutdownSignals) process.on(sig, onStop);
    try {
      let live: Session | undefined;
      let runErr: Error | undefined;
      let attempt = 0;
      let opened = 0;
      while (!stop.signal.aborted) {
        const s = new Session(this);
        if (opened++ > 0) this.stats.reconnects++;
        const err = await s.serve(stop.signal);
        if (err === undefined) {
          live = s; // stopped with the stream alive: drain through it
          break;
        }
        s.close();
        if (s.started) attempt = 0;
        if (frameTooLarge(err)) {
          runErr = new SpoolError(
            `spool: subscribe group "${this.cfg.group}": the sidecar at ${this.client.addr} sent a delivery frame larger than this client's receive limit of ${this.client.maxReceiveBytes} bytes (${errorText(err)}): raise the Client's maxReceiveBytes above the sidecar's limits.max_message_bytes plus 1 MiB, or upgrade spoold so that it bounds frames by Start.max_receive_bytes; reconnecting would only get the same frame again`,
            { code: Status.RESOURCE_EXHAUSTED, cause: err });
          this.log.error("spool: subscribe stopped: a delivery frame is larger than this client can receive", { err: runErr.message });
          break;
        }
        if (permanent(err)) {
          const e = wrapError(`spool: subscribe group "${this.cfg.group}"`, err, this.client.addr);
          runErr = Object.assign(e, {
            message: `${e.message}: the sidecar at ${this.client.addr} refused the subscription; check the group and topics against the sidecar's subscriptions`,
          });
          break;
        }
        if (stop.signal.aborted) break;
        const delay = backoffDelay(this.cfg.backoff, attempt, Math.random());
        attempt++;
        const unreachable = sidecarUnreachable(err);
        const msg = unreachable
          ? "spool: no sidecar answering; reconnecting (is spoold running? deliveries in progress will be redelivered)"
          : "spool: subscribe stream to the sidecar broke; reconnecting (deliveries in progress will be redelivered)";
        this.log.warn(msg, { group: this.cfg.group, addr: this.client.addr, err: errorText(err), retry_in_ms: Math.round(delay), attempt });
        // Nothing answered: try again after the delay, or as soon as the sidecar is back.
        if (unreachable) await this.client.awaitReconnect(delay, stop.signal);
        else await sleep(delay, stop.signal);
      }
      const drainErr = await this.drain(live);
      if (runErr) throw runErr;
      if (drainErr) throw drainErr;
    } finally {
      external?.removeEventListener("abort", onStop);
      for (const sig of this.cfg.shutdownSignals) process.off(sig, onStop);
    }
  }

  /** Stop credit, release what never started, wait for running handlers (bounded), send their outcomes, close the stream. */
  private async drain(live: Session | undefined): Promise<Error | undefined> {
    this.draining = true;
    live?.stopCredit();
    this.cfg.onDrain?.();
    this.releaseQueued();
    let err: Error | undefined;
    if (!(await this.waitIdle(this.cfg.drainTimeoutMs))) {
      this.log.warn("spool: drain timeout passed with handlers running; aborting their signal", { running: this.running, drain_timeout_ms: this.cfg.drainTimeoutMs });
      live?.abortHandlers();
      if (!(await this.waitIdle(ABANDON_AFTER_CANCEL_MS))) {
        err = new Error(`spool: drain: ${this.running} handlers still running after the drain timeout aborted their signal; they were abandoned and their messages will be redelivered when the lease ends: make handlers return when their signal aborts`);
        this.log.error("spool: drain: handlers ignore their signal; abandoning them", { running: this.running });
      }
    }
    this.releaseQueued();
    if (live) await live.finish();
    return err;
  }

  private waitIdle(ms: number): Promise<boolean> {
    if (this.running === 0) return Promise.resolve(true);
    if (ms <= 0) return Promise.resolve(false);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.idle = this.idle.filter((f) => f !== done);
        resolve(false);
      }, ms);
      const done = () => {
        clearTimeout(t);
        resolve(true);
      };
      this.idle.push(done);
    });
  }

  private releaseQueued(): void {
    while (this.qHead < this.queue.length) {
      const it = this.queue[this.qHead++]!;
      it.lease.end();
      it.s.release(it.d);
    }
    this.queue.length = 0;
    this.qHead = 0;
  }

  /** Hands a delivery to a handler now or queues it. */
  enqueue(s: Session, d: Delivery): void {
    this.queue.push({ s, d, lease: new LeaseKeeper(s, d) });
    this.pump();
  }

  private pump(): void {
    while (this.running < this.cfg.concurrency && this.qHead < this.queue.length) {
      const it = this.queue[this.qHead]!;
      this.queue[this.qHead++] = undefined as unknown as WorkItem;
      if (this.qHead > 1024 && this.qHead * 2 > this.queue.length) {
        this.queue.splice(0, this.qHead);
        this.qHead = 0;
      }
      if (it.s.dead) {
        it.lease.end();
        continue; // the stream broke: the sidecar released it already
      }
      if (this.draining) {
        it.lease.end();
        it.s.release(it.d);
        continue;
      }
      this.running++;
      void this.process(it.s, it.d, it.lease);
    }
  }

  private async process(s: Session, d: Delivery, lease: LeaseKeeper): Promise<void> {
    const m = messageOf(d);
    const st = await this.cfg.tracer.run(m, () => this.cfg.handler(m, s.handlerSignal), settlementFor);
    lease.end();
    s.settle(refOf(d), st, true);
    this.running--;
    if (this.running === 0 && this.idle.length > 0) {
      const w = this.idle;
      this.idle = [];
      for (const f of w) f();
    }
    this.pump();
  }
}

function refOf(d: Delivery): DeliveryRef {
  return { topic: d.topic, partition: d.partition, offset: d.offset, fencingToken: d.fencingToken };
}

/** Whether two refs name the same delivery (offsets and tokens may be numbers, strings or Longs). */
export function sameRef(a: DeliveryRef, b: DeliveryRef): boolean {
  return a.topic === b.topic && a.partition === b.partition && String(a.offset) === String(b.offset) && String(a.fencingToken) === String(b.fencingToken);
}

/** The queued extensions but those of ref's delivery, which is being settled. */
export function withoutExtensionsOf<E extends { ref: DeliveryRef }>(queued: E[], ref: DeliveryRef): E[] {
  return queued.filter((e) => !sameRef(e.ref, ref));
}

/**
 * Extends a delivery's lease from its receipt until its handler returns: at
 * 2/3 of the lease (from the delivery's lease deadline), then every 2/3 of
 * the visibility timeout from Started. The lease runs while a prefetched
 * delivery waits for a worker too, so the keeper starts when the delivery is
 * queued, not when its handler starts.
 */
class LeaseKeeper {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly s: Session, d: Delivery) {
    let vis = s.visibilityMs;
    const deadline = Number(d.leaseDeadlineMs);
    let at: number;
    if (deadline > 0) {
      const lease = deadline - Date.now();
      at = Math.max((lease * 2) / 3, 0);
      if (vis <= 0) vis = lease; // unknown: assume an extension grants as much again
    } else if (vis > 0) {
      at = (vis * 2) / 3;
    } else {
      return; // no lease information: nothing to extend
    }
    const every = Math.max((vis * 2) / 3, MIN_EXTEND_EVERY_MS);
    const ref = refOf(d);
    const fire = () => {
      this.timer = setTimeout(fire, every);
      s.extend(ref);
    };
    this.timer = setTimeout(fire, at);
  }

  end(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** One Subscribe stream. */
class Session {
  private readonly call: ClientDuplexStream<SubscribeRequest, SubscribeResponse>;
  private readonly handlerAbort = new AbortController();
  started = false;
  visibilityMs = 0;
  dead = false;
  private err: unknown;
  /** Credit written to the stream minus deliveries received: what the sidecar may still send. */
  private available = 0;
  private noCredit = false;
  private flushScheduled = false;
  private blocked = false; // the stream's write buffer is full: wait for 'drain'
  private pending = { acks: [] as { ref: DeliveryRef }[], nacks: [] as object[], extends: [] as { ref: DeliveryRef; extendByMs: number }[], credit: 0 };
  private broken!: Promise<unknown>;
  private onBroken!: (err: unknown) => void;

  constructor(private readonly sub: Subscriber) {
    this.broken = new Promise((resolve) => (this.onBroken = resolve));
    this.call = sub.client.sub.subscribe();
    this.call.on("data", (resp: SubscribeResponse) => this.onFrame(resp));
    this.call.on("error", (err) => this.fail(err));
    this.call.on("status", (st) => {
      if (st.code === Status.OK) this.fail(new Error("the sidecar ended the stream"));
    });
    this.call.on("drain", () => {
      this.blocked = false;
      this.flush();
    });
    const cfg = sub.cfg;
    const credit = sub.credit;
    this.available = credit;
    this.call.write({
      start: {
        group: cfg.group,
        topics: cfg.topics,
        // The bound on outstanding deliveries is what runs plus what is
        // prefetched; the credit enforces the same number.
        maxInFlight: credit,
        consumerName: cfg.consumerName,
        appVersion: cfg.appVersion,
        maxReceiveBytes: sub.client.maxReceiveBytes,
      },
      credit,
    });
  }

  get handlerSignal(): AbortSignal {
    return this.handlerAbort.signal;
  }

  /** Resolves with the stream's error when it breaks, or undefined when stop aborts first. */
  serve(stop: AbortSignal): Promise<unknown> {
    if (stop.aborted) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const onStop = () => resolve(undefined);
      stop.addEventListener("abort", onStop, { once: true });
      void this.broken.then((err) => {
        stop.removeEventListener("abort", onStop);
        resolve(err);
      });
    });
  }

  /** Marks the stream broken: settlements are dropped from now on and running handlers lose their lease. */
  private fail(err: unknown): void {
    if (this.dead) return;
    this.dead = true;
    this.err = err;
    this.handlerAbort.abort(err);
    this.call.cancel();
    this.onBroken(err);
  }

  close(): void {
    this.fail(new Error("closed"));
  }

  abortHandlers(): void {
    this.handlerAbort.abort(new Error("spool: the drain timeout passed"));
  }

  /** Flushes what is queued, half-closes the stream, waits (bounded) for the sidecar to end it, then closes. */
  async finish(): Promise<void> {
    this.flush();
    if (!this.dead) {
      this.call.end();
      let t: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        this.broken.then(() => false),
        new Promise<boolean>((r) => (t = setTimeout(() => r(true), CLOSE_STREAM_TIMEOUT_MS))),
      ]);
      clearTimeout(t);
      if (timedOut) this.sub.cfg.logger.warn("spool: the sidecar did not end the stream after the drain; closing it", { timeout_ms: CLOSE_STREAM_TIMEOUT_MS });
    }
    this.close();
  }

  stopCredit(): void {
    this.noCredit = true;
    this.pending.credit = 0;
  }

  private onFrame(resp: SubscribeResponse): void {
    if (this.dead) return;
    const stats = this.sub.stats;
    if (resp.started) {
      this.visibilityMs = resp.started.visibilityTimeoutMs;
      this.started = true;
    }
    for (const se of resp.settleErrors) {
      stats.settleErrors++;
      const r = se.ref;
      this.sub.cfg.logger.warn("spool: the sidecar rejected a settlement (the message may be redelivered; handlers should be idempotent)", {
        reason: se.reason, message: se.message, topic: r?.topic, partition: r?.partition, offset: r?.offset, fencing_token: r?.fencingToken,
      });
    }
    const ds = resp.deliveries;
    if (ds.length === 0) return;
    stats.delivered += ds.length;
    // The sidecar sent this frame against the credit it had then: take it
    // for the whole frame before any delivery reaches a handler, whose
    // settlement would return credit the sidecar had not seen.
    const within = Math.min(Math.max(this.available, 0), ds.length);
    this.available -= within;
    for (let i = 0; i < ds.length; i++) {
      const d = ds[i]!;
      if (i >= within) {
        this.sub.cfg.logger.warn("spool: the sidecar sent more deliveries than the credit granted; handing the excess back", { topic: d.topic, partition: d.partition, offset: d.offset });
        this.release(d);
      } else if (this.sub.draining) {
        this.release(d);
      } else {
        this.sub.enqueue(this, d);
      }
    }
  }

  /** Queues a handler's outcome (returning its credit) or a release (without credit). */
  settle(ref: DeliveryRef, st: Settlement, returnCredit: boolean): void {
    const stats = this.sub.stats;
    if (this.dead) {
      stats.dropped++;
      return;
    }
    if (returnCredit && !this.noCredit) this.pending.credit++;
    // An extension of the same delivery still queued would go in the same
    // frame, and the sidecar applies settlements first: it would refuse the
    // extension (NOT_IN_FLIGHT, docs/protocol.md). Extensions are few.
    if (this.pending.extends.length > 0) this.pending.extends = withoutExtensionsOf(this.pending.extends, ref);
    if (st.outcome === "OUTCOME_ACK") {
      this.pending.acks.push({ ref });
      stats.acked++;
    } else {
      this.pending.nacks.push({ ref, outcome: st.outcome, retryAfterMs: st.retryAfterMs, reason: st.reason, error: st.error, downstream: st.downstream });
      if (st.outcome === "OUTCOME_RETRY") stats.retried++;
      else if (st.outcome === "OUTCOME_DEAD_LETTER") stats.deadLettered++;
      else stats.released++;
    }
    this.scheduleFlush();
  }

  /** Hands back a delivery that was never started, without credit. */
  release(d: Delivery): void {
    this.settle(refOf(d), { outcome: "OUTCOME_RELEASE", retryAfterMs: 0, reason: "", error: "", downstream: "" }, false);
  }

  /** Queues a lease extension (extendByMs 0: the visibility timeout from now). */
  extend(ref: DeliveryRef): void {
    if (this.dead) return;
    this.pending.extends.push({ ref, extendByMs: 0 });
    this.sub.stats.extended++;
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    // setImmediate, not a microtask: handlers finishing in this turn of the
    // event loop join the frame.
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.dead || this.blocked) return;
    const p = this.pending;
    if (p.acks.length === 0 && p.nacks.length === 0 && p.extends.length === 0 && p.credit === 0) return;
    this.pending = { acks: [], nacks: [], extends: [], credit: 0 };
    // Counted before the write: a delivery sent against this credit cannot arrive before it.
    this.available += p.credit;
    const frame: SubscribeRequest = { acks: p.acks, nacks: p.nacks, extends: p.extends, credit: p.credit };
    if (!this.call.write(frame)) this.blocked = true;
  }
}
