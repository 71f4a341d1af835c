import * as grpc from "@grpc/grpc-js";

import { sleep } from "./backoff";
import { SidecarUnreachableError, wrapError } from "./errors";
import { spoolv1, type AdminServiceClient } from "./proto";
import type { PublisherServiceClient } from "./gen/spool/v1/PublisherService";
import type { SubscriberServiceClient } from "./gen/spool/v1/SubscriberService";
import type { PublishResult__Output } from "./gen/spool/v1/PublishResult";
import { Publisher, type PublisherOptions } from "./publisher";
import { Subscription, type MessagesOptions } from "./messages";
import { subscribeWith, type SubscribeOptions } from "./subscribe";
import {
  DEFAULT_ADDR, ENV_ADDR, DEFAULT_MAX_RECEIVE_BYTES, acksProto, resultOf, toPublishMessage,
  type ClientOptions, type ConnectOptions, type OutMessage, type PublishOptions, type PublishResult, type Sidecar,
} from "./types";

export { DEFAULT_ADDR, ENV_ADDR, DEFAULT_MAX_RECEIVE_BYTES } from "./types";
export type { Acks, Bytes, ClientOptions, ConnectOptions, OutMessage, PublishOptions, PublishResult } from "./types";

/** Resolves the address: the argument, else $SPOOL_ADDR, else 127.0.0.1:7070. */
export function resolveAddr(addr?: string): string {
  return addr || process.env[ENV_ADDR] || DEFAULT_ADDR;
}

/**
 * The channel's connect backoff: how soon gRPC tries the sidecar again after
 * a failed connect. gRPC's default grows to 120 s (1 s, x1.6), which kept an
 * app away from a restarted sidecar for seconds after it was ready; the
 * sidecar is local, so a retry every 500 ms costs nothing. With gRPC's
 * +-20 % jitter the retries are at most 600 ms apart, and a subscription
 * resumes as soon as the channel is ready (docs/sdk-typescript.md,
 * "Reconnecting"). `channelOptions` with the same keys replace them.
 */
export const CONNECT_BACKOFF_OPTIONS: Readonly<grpc.ChannelOptions> = Object.freeze({
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 500,
});

/**
 * The channel's keepalive: after 10 s without a frame from the sidecar gRPC
 * pings it, and closes the connection when the ping is not answered within
 * 3 s, with or without a call in progress: an app whose connection to spoold
 * crosses a network notices a cut within 13 s instead of waiting out TCP's
 * retransmissions, and a subscription reconnects (docs/sdk-typescript.md,
 * "Noticing a cut connection"). spoold permits pings every 5 s.
 * `channelOptions` with the same keys replace them.
 */
export const KEEPALIVE_OPTIONS: Readonly<grpc.ChannelOptions> = Object.freeze({
  "grpc.keepalive_time_ms": 10_000,
  "grpc.keepalive_timeout_ms": 3_000,
  "grpc.keepalive_permit_without_calls": 1,
});

/**
 * A connection to the local Spool sidecar (`spoold`). One per process is
 * enough; close it when done. The transport is insecure: the sidecar is local.
 * `addr` is "host:port" or "unix:///path/to.sock"; empty means $SPOOL_ADDR,
 * else 127.0.0.1:7070.
 */
export class Client implements Sidecar {
  readonly addr: string;
  readonly maxReceiveBytes: number;
  /** @internal */ readonly channel: grpc.Channel;
  /** @internal */ readonly pub: PublisherServiceClient;
  /** @internal */ readonly sub: SubscriberServiceClient;

  constructor(addr?: string, opts: ClientOptions = {}) {
    this.addr = resolveAddr(addr);
    this.maxReceiveBytes = opts.maxReceiveBytes ?? DEFAULT_MAX_RECEIVE_BYTES;
    if (!(this.maxReceiveBytes >= 64 * 1024 && this.maxReceiveBytes <= 1024 * 1024 * 1024)) {
      throw new RangeError(`spool: maxReceiveBytes ${this.maxReceiveBytes}: use 65536..1073741824, at least the sidecar's limits.max_message_bytes plus 1 MiB`);
    }
    const target = this.addr.startsWith("unix:") ? this.addr : `dns:${this.addr}`;
    this.channel = new grpc.Channel(target, grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": this.maxReceiveBytes,
      "grpc.max_send_message_length": -1,
      ...CONNECT_BACKOFF_OPTIONS,
      ...KEEPALIVE_OPTIONS,
      ...opts.channelOptions, // the caller's come last, and win
    });
    const v1 = spoolv1();
    const o = { channelOverride: this.channel };
    this.pub = new v1.PublisherService(this.addr, grpc.credentials.createInsecure(), o);
    this.sub = new v1.SubscriberService(this.addr, grpc.credentials.createInsecure(), o);
  }

  /**
   * Connects and waits until the sidecar answers (connectTimeoutMs, default
   * 10 s), so that a missing sidecar shows at startup.
   */
  static async connect(addr?: string, opts: ConnectOptions = {}): Promise<Client> {
    const c = new Client(addr, opts);
    try {
      await c.waitReady(opts.connectTimeoutMs ?? 10_000);
    } catch (e) {
      c.close();
      throw e;
    }
    return c;
  }

  /** Waits until the connection is ready, riding out a sidecar that starts a moment later. */
  waitReady(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pub.waitForReady(Date.now() + timeoutMs, (err) => {
        if (!err) return resolve();
        reject(new SidecarUnreachableError(
          `spool: no sidecar answering at ${this.addr} (${err.message}): is spoold running there? start it with \`spoold --dev\`, or point ${ENV_ADDR} at it`,
          { code: grpc.status.UNAVAILABLE, cause: err }));
      });
    });
  }

  /**
   * @internal Waits ms, or less: until signal aborts or, when the channel is
   * down, until it is ready again. A subscription's backoff paces its attempts
   * at a sidecar that does not answer, and one that comes back is used as soon
   * as gRPC has connected to it. A channel that is ready already (the sidecar
   * answered) waits the full ms, so that attempts never spin.
   */
  awaitReconnect(ms: number, signal: AbortSignal): Promise<void> {
    if (this.channel.getConnectivityState(false) === grpc.connectivityState.READY) {
      return sleep(ms, signal).then(() => undefined);
    }
    const done = new AbortController();
    const stop = () => done.abort();
    signal.addEventListener("abort", stop, { once: true });
    // A watcher without a deadline holds no timer; one left behind fires at
    // the channel's next change (or its close) and does nothing.
    const watch = () => {
      if (done.signal.aborted) return;
      const st = this.channel.getConnectivityState(true); // an idle channel connects
      if (st === grpc.connectivityState.READY) return done.abort();
      this.channel.watchConnectivityState(st, Infinity, watch);
    };
    watch();
    return sleep(ms, done.signal).then(() => signal.removeEventListener("abort", stop));
  }

  /**
   * Closes the connection: `await client.close()`, or `await using client =
   * await Client.connect()`. Calls in progress fail; subscriptions and
   * publishers should have ended first.
   */
  async close(): Promise<void> {
    this.pub.close();
    this.sub.close();
    this.channel.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Cancels the scheduled message id of topic before its time
   * (docs/scheduling.md): a group that reads the cancel before the message is
   * due does not deliver it. `at` (the message's PublishResult) lets the
   * sidecar read that one record; `key` narrows its search to the key's
   * partition; without either it searches the whole topic. Rejects with
   * reason UNKNOWN_SCHEDULED_MESSAGE or SCHEDULE_DUE; cancelling twice is not
   * an error.
   */
  async cancelScheduled(topic: string, id: string, opts: { at?: PublishResult; key?: string | Uint8Array; timeoutMs?: number } = {}): Promise<void> {
    const req = {
      topic, id,
      key: typeof opts.key === "string" ? Buffer.from(opts.key, "utf8") : Buffer.from(opts.key ?? []),
      ...(opts.at ? { partition: opts.at.partition, offset: String(opts.at.offset) } : {}),
    };
    const callOpts: grpc.CallOptions = {};
    if (opts.timeoutMs !== undefined) callOpts.deadline = Date.now() + opts.timeoutMs;
    await new Promise<void>((resolve, reject) => {
      this.pub.cancelScheduled(req, callOpts, (err) => (err ? reject(err) : resolve()));
    }).catch((err: unknown) => {
      throw wrapError(`spool: cancel scheduled "${id}" of "${topic}"`, err, this.addr);
    });
  }

  /**
   * Appends one message to topic; resolves once it is durable. On an error the
   * message may or may not be stored: publish it again with the same id.
   */
  async publish(topic: string, msg: OutMessage, opts: PublishOptions = {}): Promise<PublishResult> {
    const rs = await this.publishBatch(topic, [msg], opts);
    return rs[0]!;
  }

  /**
   * Appends messages to topic in one call (at most limits.max_batch_messages,
   * 10,000 by default); resolves to one result per message, in order, once all
   * are durable. It fails or succeeds as a whole; after a failure some may be
   * stored, so retry with the same ids.
   */
  async publishBatch(topic: string, msgs: OutMessage[], opts: PublishOptions = {}): Promise<PublishResult[]> {
    if (!topic) throw new TypeError("spool: publish: topic is empty: name the topic to publish to");
    if (msgs.length === 0) return [];
    const req = { topic, messages: msgs.map(toPublishMessage), acks: acksProto(opts.acks) };
    const callOpts: grpc.CallOptions = {};
    if (opts.timeoutMs !== undefined) callOpts.deadline = Date.now() + opts.timeoutMs;
    const res = await new Promise<PublishResult__Output[]>((resolve, reject) => {
      const call = this.pub.publish(req, callOpts, (err, resp) => (err ? reject(err) : resolve(resp?.results ?? [])));
      if (opts.signal) {
        if (opts.signal.aborted) call.cancel();
        else opts.signal.addEventListener("abort", () => call.cancel(), { once: true });
      }
    }).catch((err: unknown) => {
      throw wrapError(`spool: publish to "${topic}"`, err, this.addr, "publish");
    });
    if (res.length !== msgs.length) {
      throw new Error(`spool: publish to "${topic}": the sidecar answered ${res.length} results for ${msgs.length} messages: the sidecar and SDK disagree on the protocol; upgrade them together`);
    }
    return res.map(resultOf);
  }

  /** A pipelined publisher to topic over one PublishStream. Close it when done. */
  publisher(topic: string, opts: PublisherOptions = {}): Publisher {
    return new Publisher(this, topic, opts);
  }

  /**
   * Consumes topics as a consumer group until stopped (opts.signal, or the
   * process signals in opts.shutdownSignals), then drains and resolves. See
   * SubscribeOptions.
   */
  subscribe(opts: SubscribeOptions): Promise<void> {
    return subscribeWith(this, opts);
  }

  /**
   * The messages of topics for a consumer group, as an async iterator:
   * `for await (const m of client.messages({ group, topics })) { ...; m.ack(); }`.
   * See Subscription.
   */
  messages(opts: MessagesOptions): Subscription {
    return new Subscription(this, opts);
  }
}

/**
 * A client of AdminService at spoold's admin address (node.admin_listen, not
 * the app address): topics, groups, dead letters. The raw generated client.
 */
export function adminClient(adminAddr: string): AdminServiceClient {
  return new (spoolv1().AdminService)(adminAddr, grpc.credentials.createInsecure());
}

/** Connects to the sidecar, runs Client.subscribe and closes the connection when it ends. */
export async function subscribe(opts: SubscribeOptions & { addr?: string }): Promise<void> {
  const c = await Client.connect(opts.addr);
  try {
    await c.subscribe(opts);
  } finally {
    await c.close();
  }
}
