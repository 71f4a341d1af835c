// How the SDK reads a gRPC error. Every status the sidecar itself sends
// carries a google.rpc.ErrorInfo (domain spool.dev) with a stable reason
// (docs/errors.md); statuses made by gRPC on this side of the connection (no
// connection, a frame above the receive limit) carry none. That is how the
// SDK tells "the sidecar answered no" from "nothing answered".
import { Metadata, status as Status, type ServiceError } from "@grpc/grpc-js";

import { ERROR_INFO_TYPE_URL, RpcErrorInfo, RpcStatus } from "./proto";

/** The domain of every ErrorInfo spoold sends. */
export const ERROR_DOMAIN = "spool.dev";

/** Stable reasons of docs/errors.md (ErrorInfo.reason), for matching without typos. */
export const Reason = {
  INVALID_REQUEST: "INVALID_REQUEST",
  TOPIC_REQUIRED: "TOPIC_REQUIRED",
  INVALID_TOPIC_NAME: "INVALID_TOPIC_NAME",
  NO_MESSAGES: "NO_MESSAGES",
  BATCH_TOO_LARGE: "BATCH_TOO_LARGE",
  MESSAGE_TOO_LARGE: "MESSAGE_TOO_LARGE",
  KEY_TOO_LARGE: "KEY_TOO_LARGE",
  ID_TOO_LARGE: "ID_TOO_LARGE",
  TOO_MANY_HEADERS: "TOO_MANY_HEADERS",
  HEADERS_TOO_LARGE: "HEADERS_TOO_LARGE",
  INVALID_HEADER_NAME: "INVALID_HEADER_NAME",
  RESERVED_HEADER: "RESERVED_HEADER",
  BAD_PARTITION: "BAD_PARTITION",
  START_REQUIRED: "START_REQUIRED",
  START_REPEATED: "START_REPEATED",
  UNKNOWN_TOPIC: "UNKNOWN_TOPIC",
  UNKNOWN_GROUP: "UNKNOWN_GROUP",
  UNKNOWN_SUBSCRIPTION: "UNKNOWN_SUBSCRIPTION",
  WRONG_DELIVERY_MODE: "WRONG_DELIVERY_MODE",
  PARTITION_QUARANTINED: "PARTITION_QUARANTINED",
  BACKEND_UNSUPPORTED: "BACKEND_UNSUPPORTED",
  INVALID_SCHEDULE: "INVALID_SCHEDULE",
  SCHEDULE_PAST_RETENTION: "SCHEDULE_PAST_RETENTION",
  UNKNOWN_SCHEDULED_MESSAGE: "UNKNOWN_SCHEDULED_MESSAGE",
  SCHEDULE_DUE: "SCHEDULE_DUE",
  DISK_FULL: "DISK_FULL",
  SHUTTING_DOWN: "SHUTTING_DOWN",
  NOT_LEADER: "NOT_LEADER",
  NO_LEADER: "NO_LEADER",
  LEDGER_UNAVAILABLE: "LEDGER_UNAVAILABLE",
  TOPIC_NOT_PLACED: "TOPIC_NOT_PLACED",
  OUTCOME_UNKNOWN: "OUTCOME_UNKNOWN",
  CANCELLED: "CANCELLED",
  DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
  INTERNAL: "INTERNAL",
} as const;
export type KnownReason = (typeof Reason)[keyof typeof Reason];

/** Reasons whose request, sent again unchanged, can succeed (docs/errors.md, "retry"). */
const RETRYABLE_REASONS = new Set<string>([
  Reason.DISK_FULL, Reason.SHUTTING_DOWN, Reason.NOT_LEADER, Reason.NO_LEADER, Reason.LEDGER_UNAVAILABLE,
  Reason.TOPIC_NOT_PLACED, Reason.OUTCOME_UNKNOWN, Reason.DEADLINE_EXCEEDED,
]);

/**
 * An error from the sidecar or from the connection to it. `code` is the gRPC
 * status code (`grpc.status`), `reason` the sidecar's ErrorInfo reason ("" when
 * the status did not come from spoold: nothing answered, or gRPC refused on
 * this side), `metadata` the ErrorInfo metadata (`index`, `limit` ...).
 */
export class SpoolError extends Error {
  override name = "SpoolError";
  readonly code: Status;
  readonly reason: string;
  readonly metadata: Readonly<Record<string, string>>;
  /** Whether sending the same request again, unchanged, can succeed (with the same message ids). */
  readonly retryable: boolean;
  /** The sidecar's own message (what was wrong and what to do), without the SDK's context. */
  readonly details: string;

  constructor(message: string, init: { code: Status; reason?: string; metadata?: Record<string, string>; details?: string; cause?: unknown }) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code;
    this.reason = init.reason ?? "";
    this.metadata = init.metadata ?? {};
    this.details = init.details ?? "";
    this.retryable = this.reason !== "" ? RETRYABLE_REASONS.has(this.reason) : init.code === Status.UNAVAILABLE;
  }
}

/** The sidecar refused a request for good: fix it (INVALID_ARGUMENT: malformed or over a limit). */
export class InvalidRequestError extends SpoolError { override name = "InvalidRequestError"; }
/** The topic, group or subscription is not declared in the sidecar's configuration (NOT_FOUND). */
export class NotFoundError extends SpoolError { override name = "NotFoundError"; }
/** The state of the sidecar does not allow the request (FAILED_PRECONDITION). */
export class FailedPreconditionError extends SpoolError { override name = "FailedPreconditionError"; }
/** The sidecar answered that it cannot do it now (UNAVAILABLE, DISK_FULL ...): retry later with the same ids. */
export class UnavailableError extends SpoolError { override name = "UnavailableError"; }
/** Nothing answered at the address: is spoold running? */
export class SidecarUnreachableError extends SpoolError { override name = "SidecarUnreachableError"; }

/** What a status's grpc-status-details-bin trailer says: the first ErrorInfo. */
export function errorInfo(metadata: Metadata | undefined): { reason: string; domain: string; metadata: Record<string, string> } | undefined {
  const bins = metadata?.get("grpc-status-details-bin") ?? [];
  for (const b of bins) {
    if (!Buffer.isBuffer(b)) continue;
    let st: { details?: { typeUrl?: string; type_url?: string; value?: Uint8Array }[] };
    try {
      st = RpcStatus.toObject(RpcStatus.decode(b), { defaults: true }) as typeof st;
    } catch {
      continue;
    }
    for (const any of st.details ?? []) {
      if ((any.type_url ?? any.typeUrl) !== ERROR_INFO_TYPE_URL || !any.value) continue;
      try {
        const ei = RpcErrorInfo.toObject(RpcErrorInfo.decode(any.value), { defaults: true }) as { reason: string; domain: string; metadata: Record<string, string> };
        return ei;
      } catch {
        continue;
      }
    }
  }
  return undefined;
}

/** The ErrorInfo reason of a gRPC error, or "". */
export function errorReason(err: unknown): string {
  return errorInfo((err as Partial<ServiceError> | undefined)?.metadata)?.reason ?? "";
}

function isServiceError(err: unknown): err is ServiceError {
  return err instanceof Error && typeof (err as ServiceError).code === "number";
}

/** The gRPC code of an error, or undefined for an error that is not a gRPC status. */
export function grpcCode(err: unknown): Status | undefined {
  return isServiceError(err) ? err.code : undefined;
}

/**
 * Whether err means the sidecar could not be reached (no process listening,
 * connection refused or lost): UNAVAILABLE without a reason. A sidecar that
 * answers UNAVAILABLE with a reason (DISK_FULL, NOT_LEADER, SHUTTING_DOWN) is
 * running.
 */
export function sidecarUnreachable(err: unknown): boolean {
  return grpcCode(err) === Status.UNAVAILABLE && errorReason(err) === "";
}

/**
 * Whether a stream error is this client's gRPC refusing a frame above its
 * receive limit (RESOURCE_EXHAUSTED without a reason; the sidecar's own
 * RESOURCE_EXHAUSTED statuses carry one).
 */
export function frameTooLarge(err: unknown): boolean {
  return grpcCode(err) === Status.RESOURCE_EXHAUSTED && errorReason(err) === "";
}

/** The sidecar's message of a gRPC error (grpc-js prefixes "<code> <NAME>: "). */
export function statusDetails(err: unknown): string {
  if (isServiceError(err)) return err.details || err.message;
  return err instanceof Error ? err.message : String(err);
}

function classFor(code: Status, reason: string): typeof SpoolError {
  if (reason === "" && code === Status.UNAVAILABLE) return SidecarUnreachableError;
  switch (code) {
    case Status.INVALID_ARGUMENT:
    case Status.OUT_OF_RANGE:
      return InvalidRequestError;
    case Status.NOT_FOUND:
      return NotFoundError;
    case Status.FAILED_PRECONDITION:
      return FailedPreconditionError;
    case Status.UNAVAILABLE:
      return UnavailableError;
    case Status.RESOURCE_EXHAUSTED:
      return reason === Reason.DISK_FULL ? UnavailableError : SpoolError;
    default:
      return SpoolError;
  }
}

/** Builds the typed error for a status (a gRPC error, or a PublishStream in-band Error). */
export function makeError(message: string, code: Status, reason: string, details: string, metadata?: Record<string, string>, cause?: unknown): SpoolError {
  const C = classFor(code, reason);
  return new C(message, { code, reason, details, metadata, cause });
}

/** Wraps a gRPC error into a SpoolError whose message is `${context}: ...` and says what to do. */
export function wrapError(context: string, err: unknown, addr: string, what: "publish" | "call" = "call"): SpoolError {
  if (err instanceof SpoolError) return err;
  if (!isServiceError(err)) {
    return new SpoolError(`${context}: ${err instanceof Error ? err.message : String(err)}`, { code: Status.UNKNOWN, cause: err });
  }
  const info = errorInfo(err.metadata);
  const reason = info?.reason ?? "";
  const details = statusDetails(err);
  const codeName = Status[err.code] ?? String(err.code);
  const again = what === "publish" ? "retry with the same message ids" : "retry";
  let msg: string;
  if (reason === "" && err.code === Status.UNAVAILABLE) {
    msg = `${context}: ${details} (sidecar unreachable): is spoold running at ${addr}? start it with \`spoold --dev\`, or point SPOOL_ADDR at it; then ${again}`;
  } else if (err.code === Status.UNAVAILABLE || reason === Reason.DISK_FULL) {
    msg = `${context}: the sidecar at ${addr} cannot do it now (${reason}): ${details}: ${again} later`;
  } else if (err.code === Status.DEADLINE_EXCEEDED || err.code === Status.CANCELLED) {
    msg = `${context}: ${codeName}: ${details}: ${what === "publish" ? "the message may or may not be stored; retry with the same message ids" : "retry with a longer deadline"}`;
  } else if (reason !== "") {
    msg = `${context}: the sidecar refused it (${reason}): ${details}`;
  } else {
    msg = `${context}: ${codeName}: ${details}`;
  }
  return makeError(msg, err.code, reason, details, info?.metadata, err);
}
