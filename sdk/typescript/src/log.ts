import { inspect } from "node:util";

/** Where the SDK reports reconnects, rejected settlements and handler failures. */
export interface Logger {
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

function line(msg: string, fields?: Record<string, unknown>): string {
  if (!fields) return msg;
  const parts = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === "string" ? JSON.stringify(v) : inspect(v, { breakLength: Infinity, depth: 2 })}`);
  return `${msg} ${parts.join(" ")}`;
}

/** The default logger: one line per event on stderr. */
export const consoleLogger: Logger = {
  warn: (msg, fields) => console.warn(line(msg, fields)),
  error: (msg, fields) => console.error(line(msg, fields)),
};
