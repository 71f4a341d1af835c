// Callback mode: the application serves HandlerService and the sidecar
// calls Handle once per delivery (subscriptions with `delivery: callback`).
import { createHash, timingSafeEqual } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import type { TracerProvider } from "@opentelemetry/api";

import { consoleLogger, type Logger } from "./log";
import { messageOf } from "./message";
import { settlementFor } from "./outcome";
import { spoolv1, type HandleResponse } from "./proto";
import type { Handler } from "./subscribe";
import type { HandleRequest__Output } from "./gen/spool/v1/HandleRequest";
import { HandlerTracer } from "./trace";

/**
 * Where a callback server listens unless told otherwise: loopback (the
 * sidecar is in the same pod), on a port none of spoold's (app 7070, admin
 * 7071, cluster 7072, probe 7073). The same in every SDK.
 */
export const DEFAULT_HANDLER_ADDRESS = "127.0.0.1:7080";

export interface ServeHandlerOptions {
  /**
   * host:port (or unix:///path) to listen on: the subscription's app_address. Port 0 picks a free one.
   * Default DEFAULT_HANDLER_ADDRESS; ":port" is loopback too.
   */
  address?: string;
  handler: Handler;
  /**
   * Required of every call when set: `authorization: Bearer <token>`, what spoold sends with the
   * subscription's app_token_file. Other calls are refused with UNAUTHENTICATED before the handler runs.
   */
  token?: string;
  /** Stops the server: it stops taking calls, lets running ones finish (up to drainTimeoutMs), then closes. */
  signal?: AbortSignal;
  /** Process signals that stop the server (default ["SIGTERM", "SIGINT"]); [] leaves them to the application. */
  shutdownSignals?: NodeJS.Signals[];
  /** How long the drain waits for running handlers (default 30 s); then their signal aborts and calls are cut. */
  drainTimeoutMs?: number;
  logger?: Logger;
  /** Where the handler spans go (default: the global OpenTelemetry tracer provider); see "Tracing" in docs/sdk-typescript.md. */
  tracerProvider?: TracerProvider;
}

/**
 * A running HandlerService. The handler's result maps to HandleResponse as in
 * subscribe: return = OUTCOME_ACK; Retry/RetryDownstream = OUTCOME_RETRY with
 * retry_after_ms and downstream; DeadLetter = OUTCOME_DEAD_LETTER with its
 * reason; any other throw = OUTCOME_RETRY with its message. Release is
 * answered with status CANCELLED, which the sidecar takes as a RELEASE (no
 * attempt counted). The handler's signal aborts when the sidecar cancels the
 * call or its deadline (the lease deadline) passes.
 */
export class HandlerServer {
  /** The port listened on (useful with port 0). */
  readonly port: number;
  /** The address listened on, with the port chosen. */
  readonly address: string;
  /** Resolves when the server has stopped. */
  readonly closed: Promise<void>;
  private stopped = false;
  private onClosed!: () => void;
  private readonly calls = new Set<AbortController>();

  /** @internal */
  constructor(private readonly server: grpc.Server, address: string, port: number, private readonly drainTimeoutMs: number, private readonly cleanup: () => void) {
    this.port = port;
    this.address = address.startsWith("unix:") ? address : `${address.slice(0, address.lastIndexOf(":"))}:${port}`;
    this.closed = new Promise((r) => (this.onClosed = r));
  }

  /** @internal */
  track(ac: AbortController): () => void {
    this.calls.add(ac);
    return () => this.calls.delete(ac);
  }

  /** Stops taking calls, waits for running ones (up to the drain timeout), then closes. */
  async close(): Promise<void> {
    if (this.stopped) return this.closed;
    this.stopped = true;
    this.cleanup();
    let t: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      t = setTimeout(() => {
        for (const ac of this.calls) ac.abort(new Error("spool: the drain timeout passed"));
        this.server.forceShutdown();
        resolve();
      }, this.drainTimeoutMs);
      this.server.tryShutdown(() => resolve());
    });
    clearTimeout(t);
    this.onClosed();
  }
}

/**
 * tokenCheck compares a call's `authorization: Bearer <token>` with token in
 * constant time: SHA-256 digests, so neither the token's length nor its
 * bytes show in the time taken.
 */
function tokenCheck(token: string | undefined): ((md: grpc.Metadata) => boolean) | undefined {
  if (token === undefined) return undefined;
  if (token === "") throw new TypeError("spool: serveHandler: token is empty: pass the token of spoold's app_token_file, or leave it out");
  const want = createHash("sha256").update(token).digest();
  return (md) => {
    const v = md.get("authorization")[0];
    const given = typeof v === "string" ? v : (v?.toString("latin1") ?? "");
    const sp = given.indexOf(" ");
    const scheme = sp < 0 ? given : given.slice(0, sp);
    const ok = timingSafeEqual(createHash("sha256").update(sp < 0 ? "" : given.slice(sp + 1)).digest(), want);
    return ok && scheme.toLowerCase() === "bearer";
  };
}

/** Serves HandlerService at opts.address until stopped; resolves once listening. */
export async function serveHandler(opts: ServeHandlerOptions): Promise<HandlerServer> {
  if (typeof opts.handler !== "function") throw new TypeError("spool: serveHandler: handler is not a function: pass async (message, signal) => { ... }");
  const log = opts.logger ?? consoleLogger;
  const allowed = tokenCheck(opts.token);
  let address = opts.address ?? DEFAULT_HANDLER_ADDRESS;
  if (address.startsWith(":")) address = "127.0.0.1" + address; // no host: loopback, not every interface
  const tracer = new HandlerTracer(opts.tracerProvider);
  const server = new grpc.Server();
  let hs: HandlerServer | undefined;
  const impl = {
    handle(call: grpc.ServerUnaryCall<HandleRequest__Output, HandleResponse>, callback: grpc.sendUnaryData<HandleResponse>) {
      if (allowed && !allowed(call.metadata)) {
        callback({ code: grpc.status.UNAUTHENTICATED, details: "spool: this handler needs the sidecar's token (app_token_file)" });
        return;
      }
      const d = call.request.delivery;
      if (!d) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: "HandleRequest without a delivery" });
        return;
      }
      const ac = new AbortController();
      const untrack = hs?.track(ac);
      call.on("cancelled", () => ac.abort(new Error("the sidecar cancelled the call (lease deadline or shutdown)")));
      void (async () => {
        const m = messageOf(d);
        const st = await tracer.run(m, () => opts.handler(m, ac.signal), settlementFor);
        untrack?.();
        if (st.outcome === "OUTCOME_RELEASE") {
          callback({ code: grpc.status.CANCELLED, details: "released by the handler" });
          return;
        }
        callback(null, { outcome: st.outcome, retryAfterMs: st.retryAfterMs, reason: st.reason, error: st.error, downstream: st.downstream });
      })().catch((e: unknown) => log.error("spool: callback handler failed to answer", { err: String(e) }));
    },
  };
  server.addService(spoolv1().HandlerService.service, impl);
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(new Error(`spool: serveHandler: listening on ${address}: ${err.message}`, { cause: err })) : resolve(p)));
  });
  const host = address.slice(0, address.lastIndexOf(":"));
  if (!allowed && !address.startsWith("unix:") && !["127.0.0.1", "localhost", "[::1]"].includes(host)) {
    log.warn("spool: the callback server listens beyond loopback without a token: anyone who reaches it can hand it messages", { address });
  }
  const signals = opts.shutdownSignals ?? ["SIGTERM", "SIGINT"];
  const onStop = () => void hs?.close();
  const cleanup = () => {
    opts.signal?.removeEventListener("abort", onStop);
    for (const s of signals) process.off(s, onStop);
  };
  hs = new HandlerServer(server, address, port, opts.drainTimeoutMs ?? 30_000, cleanup);
  opts.signal?.addEventListener("abort", onStop, { once: true });
  for (const s of signals) process.on(s, onStop);
  if (opts.signal?.aborted) onStop();
  return hs;
}
