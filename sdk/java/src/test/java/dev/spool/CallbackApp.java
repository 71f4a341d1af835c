package dev.spool;

import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;

/**
 * A callback-mode app for CallbackTest's SIGTERM test: serves HandlerService,
 * records "ready", waits in awaitTermination (SIGTERM: the SDK's shutdown hook
 * closes the server), then does its own cleanup and records it. Arguments:
 * address, record file.
 */
public final class CallbackApp {
  public static void main(String[] args) throws Exception {
    try (Writer out = new OutputStreamWriter(new FileOutputStream(args[1], true), StandardCharsets.UTF_8);
        // A grace far above the test's 30 s wait for the exit: the hook must see main end, not time out.
        HandlerServer server = HandlerServer.start(args[0], m -> {},
            HandlerServerOptions.builder().shutdownGrace(java.time.Duration.ofMinutes(2)).build())) {
      out.write("ready\n");
      out.flush();
      server.awaitTermination();
      Thread.sleep(500); // sleep-ok: the cleanup's work
      out.write("cleanup after-await\n");
      out.flush();
    }
  }
}
