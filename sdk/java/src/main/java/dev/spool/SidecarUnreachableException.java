package dev.spool;

import io.grpc.Status;
import java.util.Map;

/** Nothing answered at the sidecar's address (UNAVAILABLE without a reason): is spoold running? */
public class SidecarUnreachableException extends SpoolException {
  private static final long serialVersionUID = 1L;

  public SidecarUnreachableException(String message, Status.Code code, String reason, Map<String, String> metadata, String details, Throwable cause) {
    super(message, code, reason, metadata, details, cause);
  }
}
