// The types shared by the client, the publisher and the subscription: what a
// publish takes and returns, the defaults, and Sidecar, the part of a Client
// the publisher and the subscription use. The client is on top: it imports
// the publisher and the subscription, which import this module and never the
// client.
import type * as grpc from "@grpc/grpc-js";

import type { PublishMessage } from "./proto";
import type { PublisherServiceClient } from "./gen/spool/v1/PublisherService";
import type { SubscriberServiceClient } from "./gen/spool/v1/SubscriberService";
import type { PublishResult__Output } from "./gen/spool/v1/PublishResult";
import { injectTrace } from "./trace";

/** What the publisher and the subscription use of a Client. */
export interface Sidecar {
  readonly addr: string;
  readonly maxReceiveBytes: number;
  /** @internal */ readonly pub: PublisherServiceClient;
  /** @internal */ readonly sub: SubscriberServiceClient;
  /** @internal */ awaitReconnect(ms: number, signal: AbortSignal): Promise<void>;
}

/** The sidecar address used when none is given and SPOOL_ADDR is unset. */
export const DEFAULT_ADDR = "127.0.0.1:7070";
/** The environment variable holding the sidecar address. */
export const ENV_ADDR = "SPOOL_ADDR";
/**
 * The largest frame the client accepts by default: 64 MiB, the largest
 * limits.max_message_bytes spoold allows, plus 1 MiB for a delivery's other
 * fields. Stated to the sidecar in Start.max_receive_bytes.
 */
export const DEFAULT_MAX_RECEIVE_BYTES = 65 * 1024 * 1024;

/** When a publish returns (docs/semantics.md, "Replication"). */
export type Acks = "all" | "leader";

/** Bytes as Buffer, Uint8Array or a string (encoded as UTF-8). */
export type Bytes = Buffer | Uint8Array | string;

/** One message to publish. */
export interface OutMessage {
  /** Optional; the sidecar generates a UUIDv7 when empty. Set it to make a retried publish deduplicable. At most 128 bytes. */
  id?: string;
  /** Partitioning key: same key, same partition, publish order. Empty spreads messages over the partitions. */
  key?: Bytes;
  /** Message body. */
  payload?: Bytes;
  /**
   * Application headers (names starting with "spool-" are reserved). A publish
   * adds `traceparent`/`tracestate` of the active OpenTelemetry context to a
   * copy, unless a `traceparent` is already there.
   */
  headers?: Record<string, string>;
  /**
   * Scheduled delivery (docs/scheduling.md): the message is stored now and
   * delivered no sooner than this time, outside its key's order (unless
   * deliverInKeyOrder). A time in
   * the past is delivered at once; more than a year ahead, or past the
   * topic's retention, is refused (INVALID_SCHEDULE, SCHEDULE_PAST_RETENTION).
   */
  deliverAt?: Date;
  /** Scheduled delivery this many milliseconds after the sidecar receives the publish (1,000 to 31,536,000,000). Set at most one of the two. */
  deliverAfterMs?: number;
  /** Keep the scheduled message in its key's order: the key's later messages wait for it. Only with deliverAt or deliverAfterMs. */
  deliverInKeyOrder?: boolean;
}

/** Where a published message was stored, once it is durable. */
export interface PublishResult {
  id: string;
  partition: number;
  offset: bigint;
}

export interface PublishOptions {
  /** "all" (default): once committed on a quorum of replicas. "leader": once on the leader's disk (lossy, faster). */
  acks?: Acks;
  /** Gives up after this many milliseconds (the message may or may not be stored then). */
  timeoutMs?: number;
  /** Aborts the call (the message may or may not be stored then). */
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** Largest message the client accepts from the sidecar (default 65 MiB); at least limits.max_message_bytes + 1 MiB. */
  maxReceiveBytes?: number;
  /** Extra gRPC channel options. */
  channelOptions?: grpc.ChannelOptions;
}

export interface ConnectOptions extends ClientOptions {
  /** How long connect waits for the sidecar to answer (default 10 s). */
  connectTimeoutMs?: number;
}

export function acksProto(a: Acks | undefined): "ACKS_UNSPECIFIED" | "ACKS_LEADER" {
  // ACKS_UNSPECIFIED is ACKS_ALL, also for a sidecar that predates the field.
  return a === "leader" ? "ACKS_LEADER" : "ACKS_UNSPECIFIED";
}

function bytes(b: Bytes | undefined): Buffer {
  if (b === undefined) return Buffer.alloc(0);
  if (typeof b === "string") return Buffer.from(b, "utf8");
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

/**
 * The wire form of m, its headers with the active trace context added
 * (docs/protocol.md, "Trace context"): called where the caller publishes, so
 * that the active context is the caller's.
 */
export function toPublishMessage(m: OutMessage): PublishMessage & { key: Buffer; payload: Buffer } {
  return {
    id: m.id ?? "",
    key: bytes(m.key),
    payload: bytes(m.payload),
    headers: injectTrace(m.headers) ?? {},
    deliverAtMs: scheduleMs("deliverAt", m.deliverAt === undefined ? undefined : m.deliverAt.getTime()),
    deliverAfterMs: scheduleMs("deliverAfterMs", m.deliverAfterMs),
    deliverInKeyOrder: m.deliverInKeyOrder ?? false,
  };
}

/** A scheduled delivery's wire value (whole milliseconds, rounded up: never early); 0 when unset. */
function scheduleMs(name: string, ms: number | undefined): string {
  if (ms === undefined) return "0";
  if (!Number.isFinite(ms)) throw new TypeError(`spool: publish: ${name} is not a valid time or delay: pass a Date or a number of milliseconds`);
  return String(Math.ceil(ms));
}

export function resultOf(r: PublishResult__Output): PublishResult {
  return { id: r.id, partition: r.partition, offset: BigInt(r.offset) };
}

