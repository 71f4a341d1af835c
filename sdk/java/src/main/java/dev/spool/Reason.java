package dev.spool;

/**
 * The stable reasons of docs/errors.md ({@code google.rpc.ErrorInfo.reason},
 * domain {@code spool.dev}), for matching {@link SpoolException#reason()}
 * without typos. Match on the reason, never on the message text.
 */
public final class Reason {
  private Reason() {}

  /** The domain of every ErrorInfo spoold sends. */
  public static final String DOMAIN = "spool.dev";

  public static final String INVALID_REQUEST = "INVALID_REQUEST";
  public static final String TOPIC_REQUIRED = "TOPIC_REQUIRED";
  public static final String INVALID_TOPIC_NAME = "INVALID_TOPIC_NAME";
  public static final String NO_MESSAGES = "NO_MESSAGES";
  public static final String BATCH_TOO_LARGE = "BATCH_TOO_LARGE";
  public static final String MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE";
  public static final String KEY_TOO_LARGE = "KEY_TOO_LARGE";
  public static final String ID_TOO_LARGE = "ID_TOO_LARGE";
  public static final String TOO_MANY_HEADERS = "TOO_MANY_HEADERS";
  public static final String HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE";
  public static final String INVALID_HEADER_NAME = "INVALID_HEADER_NAME";
  public static final String RESERVED_HEADER = "RESERVED_HEADER";
  public static final String BAD_PARTITION = "BAD_PARTITION";
  public static final String START_REQUIRED = "START_REQUIRED";
  public static final String START_REPEATED = "START_REPEATED";
  public static final String UNKNOWN_TOPIC = "UNKNOWN_TOPIC";
  public static final String UNKNOWN_GROUP = "UNKNOWN_GROUP";
  public static final String UNKNOWN_SUBSCRIPTION = "UNKNOWN_SUBSCRIPTION";
  public static final String WRONG_DELIVERY_MODE = "WRONG_DELIVERY_MODE";
  public static final String PARTITION_QUARANTINED = "PARTITION_QUARANTINED";
  public static final String BACKEND_UNSUPPORTED = "BACKEND_UNSUPPORTED";
  public static final String INVALID_SCHEDULE = "INVALID_SCHEDULE";
  public static final String SCHEDULE_PAST_RETENTION = "SCHEDULE_PAST_RETENTION";
  public static final String UNKNOWN_SCHEDULED_MESSAGE = "UNKNOWN_SCHEDULED_MESSAGE";
  public static final String SCHEDULE_DUE = "SCHEDULE_DUE";
  public static final String DISK_FULL = "DISK_FULL";
  public static final String SHUTTING_DOWN = "SHUTTING_DOWN";
  public static final String NOT_LEADER = "NOT_LEADER";
  public static final String NO_LEADER = "NO_LEADER";
  public static final String LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE";
  public static final String TOPIC_NOT_PLACED = "TOPIC_NOT_PLACED";
  public static final String OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN";
  public static final String CANCELLED = "CANCELLED";
  public static final String DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED";
  public static final String INTERNAL = "INTERNAL";
}
