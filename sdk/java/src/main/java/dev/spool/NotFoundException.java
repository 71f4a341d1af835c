package dev.spool;

import io.grpc.Status;
import java.util.Map;

/** The topic, group or subscription is not declared in the sidecar's configuration (NOT_FOUND: UNKNOWN_TOPIC, UNKNOWN_GROUP, UNKNOWN_SUBSCRIPTION). */
public class NotFoundException extends SpoolException {
  private static final long serialVersionUID = 1L;

  public NotFoundException(String message, Status.Code code, String reason, Map<String, String> metadata, String details, Throwable cause) {
    super(message, code, reason, metadata, details, cause);
  }
}
