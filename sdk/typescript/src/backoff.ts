/** Exponential backoff with full jitter: attempt n waits a uniformly random time in [0, min(max, base*2^n)). */
export interface Backoff {
  baseMs: number;
  maxMs: number;
}

/** Pure: attempt counts from 0, draw is uniform in [0, 1). */
export function backoffDelay(b: Backoff, attempt: number, draw: number): number {
  let ceiling = b.baseMs;
  for (let i = 0; i < attempt && ceiling < b.maxMs; i++) ceiling *= 2;
  return draw * Math.min(ceiling, b.maxMs);
}

/** Waits ms, or until signal aborts; resolves true when the full time passed. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
