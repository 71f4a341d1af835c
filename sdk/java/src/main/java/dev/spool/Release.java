package dev.spool;

/**
 * Hand the delivery back without processing it: it is delivered again at
 * once (maybe to another consumer) and no attempt is counted. For a handler
 * that finds it cannot start now (shutting down, a local resource missing);
 * not for failures, and not to wait (it comes back at once).
 */
public class Release extends OutcomeException {
  private static final long serialVersionUID = 1L;

  public Release() {
    this("released by the handler");
  }

  public Release(String why) {
    super(why, null);
  }
}
