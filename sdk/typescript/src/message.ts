import type { Delivery } from "./proto";

/**
 * One delivery handed to a handler. Dedupe on `id`; fence your writes with
 * `fencingToken`.
 */
export interface Message {
  /** Message id, stable across redeliveries: dedupe on it. */
  readonly id: string;
  /** Where the message is stored. */
  readonly topic: string;
  readonly partition: number;
  readonly offset: bigint;
  /** Partitioning key as published (may be empty). */
  readonly key: Buffer;
  /** Message body as published. */
  readonly payload: Buffer;
  /** Application headers as published. */
  readonly headers: Readonly<Record<string, string>>;
  /** When the message was appended to the log. */
  readonly publishTime: Date;
  /** When the message was first delivered to this group. */
  readonly firstDeliveryTime: Date;
  /**
   * When the lease of this delivery ends as first granted. The SDK extends the
   * lease while the handler runs, so a handler need not watch it.
   */
  readonly leaseDeadline: Date;
  /** Deliveries to this group, starting at 1. */
  readonly attempt: number;
  /** Error text of the previous failed attempt ("" on the first). */
  readonly lastError: string;
  /**
   * Grows strictly each time the message is (re)delivered in its partition and
   * group. Store it with the handler's writes and reject writes carrying an
   * older token: they come from an attempt whose lease expired.
   */
  readonly fencingToken: bigint;
  /** Consumer group the delivery belongs to. */
  readonly group: string;
}

export function messageOf(d: Delivery): Message {
  return {
    id: d.messageId,
    topic: d.topic,
    partition: d.partition,
    offset: BigInt(d.offset),
    key: d.key,
    payload: d.payload,
    headers: d.headers,
    publishTime: new Date(Number(d.publishTimeMs)),
    firstDeliveryTime: new Date(Number(d.firstDeliveryTimeMs)),
    leaseDeadline: new Date(Number(d.leaseDeadlineMs)),
    attempt: d.attempt,
    lastError: d.lastError,
    fencingToken: BigInt(d.fencingToken),
    group: d.group,
  };
}
