package dev.spool;

import java.util.List;
import java.util.ResourceBundle;
import java.util.concurrent.CopyOnWriteArrayList;

/** A System.Logger that keeps what it is told (WARNING and above), for assertions. */
final class CapturingLogger implements System.Logger {
  final List<String> lines = new CopyOnWriteArrayList<>();

  @Override
  public String getName() {
    return "test";
  }

  @Override
  public boolean isLoggable(Level level) {
    return level.getSeverity() >= Level.WARNING.getSeverity();
  }

  @Override
  public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {
    lines.add(level + " " + msg + (thrown == null ? "" : " " + thrown));
  }

  @Override
  public void log(Level level, ResourceBundle bundle, String format, Object... params) {
    lines.add(level + " " + format);
  }

  boolean contains(String s) {
    return lines.stream().anyMatch(l -> l.contains(s));
  }
}
