package dev.spool;

import java.sql.Connection;

/**
 * Does the application's work for one message inside the transaction that
 * also records the message id ({@link Idempotent}). Every write that belongs
 * to the work goes through {@code tx}; do not commit, roll back or close it.
 * Returning commits and acks; an exception rolls back and keeps its meaning
 * as an outcome ({@link Retry}, {@link DeadLetter}, anything else = RETRY).
 */
@FunctionalInterface
public interface TxHandler {
  void handle(Connection tx, Message m) throws Exception;
}
