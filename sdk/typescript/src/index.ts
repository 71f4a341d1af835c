export { Client, adminClient, subscribe, DEFAULT_ADDR, ENV_ADDR, DEFAULT_MAX_RECEIVE_BYTES, CONNECT_BACKOFF_OPTIONS, KEEPALIVE_OPTIONS } from "./client";
export type { Acks, Bytes, ClientOptions, ConnectOptions, OutMessage, PublishOptions, PublishResult } from "./client";
export { Stats } from "./subscribe";
export type { Handler, SubscribeOptions } from "./subscribe";
export type { Message } from "./message";
export { Subscription } from "./messages";
export type { MessagesOptions, ReceivedMessage } from "./messages";
export { Retry, RetryDownstream, DeadLetter, Release, MAX_ERROR_TEXT_BYTES } from "./outcome";
export {
  SpoolError, InvalidRequestError, NotFoundError, FailedPreconditionError, UnavailableError, SidecarUnreachableError,
  Reason, ERROR_DOMAIN, errorInfo,
} from "./errors";
export type { KnownReason } from "./errors";
export type { Logger } from "./log";
export { Publisher } from "./publisher";
export type { PublisherOptions, Published } from "./publisher";
export { idempotent, IdempotentStats, DEFAULT_IDEMPOTENT_TABLE, createTableSQL } from "./idempotent";
export type { IdempotentOptions, TxHandler, PgPoolLike, PgClientLike, PgClientOf } from "./idempotent";
export { serveHandler, HandlerServer, DEFAULT_HANDLER_ADDRESS } from "./callback";
export type { ServeHandlerOptions } from "./callback";
export { PROTO_DIR } from "./proto";
export type { AdminServiceClient } from "./proto";
export { HEADER_TRACEPARENT, HEADER_TRACESTATE, injectTrace, extractTrace, parseTraceparent, formatTraceparent } from "./trace";
