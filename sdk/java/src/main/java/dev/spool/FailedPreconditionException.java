package dev.spool;

import io.grpc.Status;
import java.util.Map;

/** The sidecar's state does not allow the request (FAILED_PRECONDITION); retrying will not change that. */
public class FailedPreconditionException extends SpoolException {
  private static final long serialVersionUID = 1L;

  public FailedPreconditionException(String message, Status.Code code, String reason, Map<String, String> metadata, String details, Throwable cause) {
    super(message, code, reason, metadata, details, cause);
  }
}
