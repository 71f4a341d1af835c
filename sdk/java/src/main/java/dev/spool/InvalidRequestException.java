package dev.spool;

import io.grpc.Status;
import java.util.Map;

/** The sidecar refused a request for good (INVALID_ARGUMENT, OUT_OF_RANGE): malformed or over a limit; fix it, do not retry it unchanged. */
public class InvalidRequestException extends SpoolException {
  private static final long serialVersionUID = 1L;

  public InvalidRequestException(String message, Status.Code code, String reason, Map<String, String> metadata, String details, Throwable cause) {
    super(message, code, reason, metadata, details, cause);
  }
}
