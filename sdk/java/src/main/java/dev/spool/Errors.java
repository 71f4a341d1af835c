package dev.spool;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.util.Map;

/**
 * How the SDK reads a gRPC error. Every status the sidecar itself sends
 * carries a {@code google.rpc.ErrorInfo} (domain spool.dev) with a stable
 * reason; statuses made by gRPC on this side of the connection (no
 * connection, a frame above the receive limit) carry none. That is how the
 * SDK tells "the sidecar answered no" from "nothing answered".
 */
final class Errors {
  private Errors() {}

  /** What a call was, for the advice in its error. */
  enum Op {
    PUBLISH,
    CALL
  }

  /** The first ErrorInfo in the status details of t, or null. */
  static ErrorInfo errorInfo(Throwable t) {
    com.google.rpc.Status st;
    try {
      st = StatusProto.fromThrowable(t);
    } catch (RuntimeException e) { // a malformed details trailer: no reason
      return null;
    }
    if (st == null) {
      return null;
    }
    for (Any any : st.getDetailsList()) {
      if (any.is(ErrorInfo.class)) {
        try {
          return any.unpack(ErrorInfo.class);
        } catch (InvalidProtocolBufferException e) {
          return null;
        }
      }
    }
    return null;
  }

  /** The ErrorInfo reason of a gRPC error, or "". */
  static String reason(Throwable t) {
    ErrorInfo ei = errorInfo(t);
    return ei == null ? "" : ei.getReason();
  }

  /** The gRPC code of t (UNKNOWN for a throwable that is not a status). */
  static Status.Code code(Throwable t) {
    return Status.fromThrowable(t).getCode();
  }

  /**
   * Whether t means the sidecar could not be reached (no process listening,
   * connection refused or lost): UNAVAILABLE without a reason. A sidecar that
   * answers UNAVAILABLE with a reason (DISK_FULL, NOT_LEADER, SHUTTING_DOWN)
   * is running.
   */
  static boolean sidecarUnreachable(Throwable t) {
    return code(t) == Status.Code.UNAVAILABLE && reason(t).isEmpty();
  }

  /**
   * Whether a stream error is this client's gRPC refusing a frame above its
   * receive limit (RESOURCE_EXHAUSTED without a reason; the sidecar's own
   * RESOURCE_EXHAUSTED statuses carry one): reconnecting gets the same frame.
   */
  static boolean frameTooLarge(Throwable t) {
    return code(t) == Status.Code.RESOURCE_EXHAUSTED && reason(t).isEmpty();
  }

  /**
   * Whether a stream error will not go away by reconnecting: a refusal of the
   * request itself. Transport failures, sidecar restarts (SHUTTING_DOWN),
   * overload and cancellation are retried.
   */
  static boolean permanent(Throwable t) {
    switch (code(t)) {
      case INVALID_ARGUMENT:
      case NOT_FOUND:
      case PERMISSION_DENIED:
      case UNAUTHENTICATED:
      case FAILED_PRECONDITION:
      case UNIMPLEMENTED:
        return true;
      default:
        return false;
    }
  }

  /** The typed exception for a status (a gRPC error, or a PublishStream in-band error). */
  static SpoolException make(String message, Status.Code code, String reason, String details, Map<String, String> metadata, Throwable cause) {
    if (reason.isEmpty() && code == Status.Code.UNAVAILABLE) {
      return new SidecarUnreachableException(message, code, reason, metadata, details, cause);
    }
    switch (code) {
      case INVALID_ARGUMENT:
      case OUT_OF_RANGE:
        return new InvalidRequestException(message, code, reason, metadata, details, cause);
      case NOT_FOUND:
        return new NotFoundException(message, code, reason, metadata, details, cause);
      case FAILED_PRECONDITION:
        return new FailedPreconditionException(message, code, reason, metadata, details, cause);
      case UNAVAILABLE:
        return new UnavailableException(message, code, reason, metadata, details, cause);
      case RESOURCE_EXHAUSTED:
        if (Reason.DISK_FULL.equals(reason)) {
          return new UnavailableException(message, code, reason, metadata, details, cause);
        }
        return new SpoolException(message, code, reason, metadata, details, cause);
      default:
        return new SpoolException(message, code, reason, metadata, details, cause);
    }
  }

  /** Wraps a gRPC error into a SpoolException whose message is "context: ..." and says what to do. */
  static SpoolException wrap(String context, Throwable t, String addr, Op op) {
    if (t instanceof SpoolException) {
      return (SpoolException) t;
    }
    Status st = Status.fromThrowable(t);
    ErrorInfo ei = errorInfo(t);
    String reason = ei == null ? "" : ei.getReason();
    Map<String, String> md = ei == null ? Map.of() : ei.getMetadataMap();
    String details = st.getDescription() != null ? st.getDescription() : String.valueOf(t.getMessage());
    Status.Code code = st.getCode();
    String again = op == Op.PUBLISH ? "retry with the same message ids" : "retry";
    String msg;
    if (reason.isEmpty() && code == Status.Code.UNAVAILABLE) {
      msg = context + ": " + details + " (sidecar unreachable): is spoold running at " + addr
          + "? start it with `spoold --dev`, or point " + Client.ENV_ADDR + " at it; then " + again;
    } else if (code == Status.Code.UNAVAILABLE || Reason.DISK_FULL.equals(reason)) {
      msg = context + ": the sidecar at " + addr + " cannot do it now (" + reason + "): " + details + ": " + again + " later";
    } else if (code == Status.Code.DEADLINE_EXCEEDED || code == Status.Code.CANCELLED) {
      msg = context + ": " + code + ": " + details + ": "
          + (op == Op.PUBLISH ? "the message may or may not be stored; retry with the same message ids" : "retry with a longer deadline");
    } else if (!reason.isEmpty()) {
      msg = context + ": the sidecar refused it (" + reason + "): " + details;
    } else {
      msg = context + ": " + code + ": " + details;
    }
    return make(msg, code, reason, details, md, t);
  }
}
