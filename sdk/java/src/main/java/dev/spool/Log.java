package dev.spool;

import java.lang.System.Logger.Level;

/** Structured-ish log lines through System.Logger: a message, then key=value pairs. */
final class Log {
  private Log() {}

  static void log(System.Logger l, Level level, String msg, Object... kv) {
    if (!l.isLoggable(level)) {
      return;
    }
    l.log(level, line(msg, kv));
  }

  static void log(System.Logger l, Level level, String msg, Throwable t, Object... kv) {
    if (!l.isLoggable(level)) {
      return;
    }
    l.log(level, line(msg, kv), t);
  }

  static String line(String msg, Object... kv) {
    StringBuilder b = new StringBuilder(msg);
    for (int i = 0; i + 1 < kv.length; i += 2) {
      b.append(' ').append(kv[i]).append('=').append(kv[i + 1]);
    }
    return b.toString();
  }
}
