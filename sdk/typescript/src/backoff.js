"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.backoffDelay = backoffDelay;
exports.sleep = sleep;
/** Pure: attempt counts from 0, draw is uniform in [0, 1). */
function backoffDelay(b, attempt, draw) {
    let ceiling = b.baseMs;
    for (let i = 0; i < attempt && ceiling < b.maxMs; i++)
        ceiling *= 2;
    return draw * Math.min(ceiling, b.maxMs);
}
/** Waits ms, or until signal aborts; resolves true when the full time passed. */
function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal?.aborted)
            return resolve(false);
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
