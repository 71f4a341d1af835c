package dev.spool;

import io.grpc.Status;
import java.util.Map;

/** The sidecar answered that it cannot do it now (UNAVAILABLE with a reason, DISK_FULL): retry later with the same message ids. */
public class UnavailableException extends SpoolException {
  private static final long serialVersionUID = 1L;

  public UnavailableException(String message, Status.Code code, String reason, Map<String, String> metadata, String details, Throwable cause) {
    super(message, code, reason, metadata, details, cause);
  }
}
