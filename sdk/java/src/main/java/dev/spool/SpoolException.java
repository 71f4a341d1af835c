package dev.spool;

import io.grpc.Status;
import java.util.Map;
import java.util.Set;

/**
 * An error from the sidecar or from the connection to it. {@link #code()} is
 * the gRPC status code; {@link #reason()} the sidecar's stable reason (its
 * {@code google.rpc.ErrorInfo}, or a PublishStream in-band error), or "" when
 * the status was not made by spoold (nothing answered, or gRPC refused on this
 * side); {@link #metadata()} the ErrorInfo metadata ({@code index} of the
 * message in a batch, {@code limit}); {@link #details()} the sidecar's own
 * message. The message of the exception says what to do.
 *
 * <p>Subclasses name the main cases: {@link InvalidRequestException}, {@link
 * NotFoundException}, {@link FailedPreconditionException}, {@link
 * UnavailableException}, {@link SidecarUnreachableException}, {@link
 * DrainException}.
 */
public class SpoolException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** Reasons whose request, sent again unchanged, can succeed (docs/errors.md, "retry"). */
  private static final Set<String> RETRYABLE_REASONS = Set.of(
      Reason.DISK_FULL, Reason.SHUTTING_DOWN, Reason.NOT_LEADER, Reason.NO_LEADER,
      Reason.LEDGER_UNAVAILABLE, Reason.TOPIC_NOT_PLACED, Reason.OUTCOME_UNKNOWN, Reason.DEADLINE_EXCEEDED);

  private final Status.Code code;
  private final String reason;
  private final Map<String, String> metadata;
  private final String details;

  public SpoolException(String message, Status.Code code, String reason, Map<String, String> metadata, String details, Throwable cause) {
    super(message, cause);
    this.code = code;
    this.reason = reason == null ? "" : reason;
    this.metadata = metadata == null ? Map.of() : Map.copyOf(metadata);
    this.details = details == null ? "" : details;
  }

  public SpoolException(String message, Status.Code code) {
    this(message, code, "", Map.of(), "", null);
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The sidecar's ErrorInfo reason (constants in {@link Reason}), or "" when spoold did not make the status. */
  public String reason() {
    return reason;
  }

  /** The ErrorInfo metadata: {@code index} (which message of a batch), {@code limit}. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** The sidecar's message: what was wrong and what to do, without the SDK's context. */
  public String details() {
    return details;
  }

  /**
   * Whether the same request, unchanged (with the same message ids), can
   * succeed later: a retryable reason, or UNAVAILABLE without a reason
   * (nothing answered).
   */
  public boolean isRetryable() {
    return reason.isEmpty() ? code == Status.Code.UNAVAILABLE : RETRYABLE_REASONS.contains(reason);
  }
}
