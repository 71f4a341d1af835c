"use strict";
// A handler's result is the delivery's outcome:
//
//   - returns normally: ACK, never delivered to this group again;
//   - throws Retry / RetryDownstream: RETRY after the given delay (0 = the
//     subscription's backoff), its error text shown to the next attempt;
//   - throws DeadLetter: DEAD_LETTER now, with the reason kept in the DLQ entry;
//   - throws Release: handed back unstarted (RELEASE), no attempt counted;
//   - throws anything else: RETRY after the backoff, with its message.
//
// An outcome may be the `cause` of another error (new Error("charging", {
// cause: new Retry(...) })): the SDK follows the cause chain, like Go's errors.As.
Object.defineProperty(exports, "__esModule", { value: true });
exports.MAX_ERROR_TEXT_BYTES = exports.Release = exports.DeadLetter = exports.RetryDownstream = exports.Retry = void 0;
exports.errorText = errorText;
exports.cleanText = cleanText;
exports.settlementFor = settlementFor;
/** Ask for the delivery to be retried no sooner than `afterMs` (0 = the subscription's backoff). */
class Retry extends Error {
    name = "Retry";
    /** Minimum delay before the next attempt, milliseconds; 0 means the subscription's backoff. */
    afterMs;
    /** The dependency that failed (feeds its circuit breaker in the sidecar); "" when none. */
    downstream;
    /**
     * @param afterMs minimum delay before the next attempt (0 = the backoff)
     * @param error the cause; its message becomes the next attempt's `lastError`
     */
    constructor(afterMs = 0, error, downstream = "") {
        super(retryText(afterMs, error, downstream), error === undefined ? undefined : { cause: error });
        this.afterMs = afterMs;
        this.downstream = downstream;
    }
}
exports.Retry = Retry;
/**
 * Retry for a failure of a named dependency (for example "email-provider").
 * The sidecar counts such retries toward that downstream's circuit breaker
 * and pauses the subscription while it is open (attempts are not counted then).
 */
class RetryDownstream extends Retry {
    name = "RetryDownstream";
    constructor(downstream, afterMs = 0, error) {
        super(afterMs, error, downstream);
    }
}
exports.RetryDownstream = RetryDownstream;
/** The message can never succeed (poison): to the subscription's dead-letter topic now. */
class DeadLetter extends Error {
    name = "DeadLetter";
    reason;
    constructor(reason) {
        super(`dead letter: ${reason}`);
        this.reason = reason;
    }
}
exports.DeadLetter = DeadLetter;
/**
 * Hand the delivery back without processing it: it is delivered again (maybe
 * to another consumer) and no attempt is counted. For a handler that finds it
 * cannot start now (shutting down, a local resource missing); not for failures.
 */
class Release extends Error {
    name = "Release";
    constructor(why = "released by the handler") {
        super(why);
    }
}
exports.Release = Release;
function retryText(afterMs, error, downstream) {
    let s = "retry";
    if (downstream)
        s += ` (downstream ${downstream})`;
    if (afterMs > 0)
        s += ` after ${afterMs}ms`;
    if (error !== undefined)
        s += `: ${errorText(error)}`;
    return s;
}
/** The text of anything thrown. */
function errorText(e) {
    if (e instanceof Error)
        return e.message || e.name;
    if (typeof e === "string")
        return e;
    try {
        return String(e);
    }
    catch {
        return "unprintable error";
    }
}
/** Finds an outcome in e or its cause chain (at most 32 deep). */
function findOutcome(e) {
    for (let i = 0; i < 32 && e instanceof Error; i++) {
        if (e instanceof Retry || e instanceof DeadLetter || e instanceof Release)
            return e;
        e = e.cause;
    }
    return undefined;
}
/** MAX_ERROR_TEXT_BYTES bounds the error text and reason sent with a nack. */
exports.MAX_ERROR_TEXT_BYTES = 4096;
/** Cuts text to at most MAX_ERROR_TEXT_BYTES of UTF-8, on a character boundary. */
function cleanText(s) {
    // Encoding turns lone surrogates into U+FFFD, as the proto encoder would.
    const b = Buffer.from(s, "utf8");
    if (b.length <= exports.MAX_ERROR_TEXT_BYTES)
        return b.toString("utf8");
    let cut = exports.MAX_ERROR_TEXT_BYTES;
    while (cut > 0 && (b[cut] & 0xc0) === 0x80)
        cut--;
    return b.subarray(0, cut).toString("utf8") + "…";
}
const MAX_U32 = 0xffffffff;
/** Maps a handler's result (undefined = returned normally, else what it threw) to a settlement. */
function settlementFor(thrown, ok) {
    const s = { outcome: "OUTCOME_ACK", retryAfterMs: 0, reason: "", error: "", downstream: "" };
    if (ok)
        return s;
    const o = findOutcome(thrown);
    if (o instanceof Release) {
        s.outcome = "OUTCOME_RELEASE";
        return s;
    }
    if (o instanceof DeadLetter) {
        s.outcome = "OUTCOME_DEAD_LETTER";
        s.reason = cleanText(o.reason);
        s.error = cleanText(errorText(thrown));
        return s;
    }
    s.outcome = "OUTCOME_RETRY";
    s.error = cleanText(errorText(thrown));
    if (o instanceof Retry) {
        s.downstream = cleanText(o.downstream);
        if (o.afterMs > 0)
            s.retryAfterMs = Math.min(Math.max(Math.ceil(o.afterMs), 1), MAX_U32);
    }
    return s;
}
