package dev.spool;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Forwards TCP connections to a target until {@link #cut()}: then the
 * connections open at that moment stop forwarding both ways without closing
 * (what arrives is read and dropped, as a network that loses every packet
 * would, past the kernel's acknowledgements), and pass no close on. Later
 * connections are forwarded as before.
 */
final class CutProxy implements AutoCloseable {
  private static final class Conn {
    final Socket a;
    final Socket b;
    volatile boolean cut;

    Conn(Socket a, Socket b) {
      this.a = a;
      this.b = b;
    }
  }

  private final ServerSocket server;
  private final String host;
  private final int port;
  private final List<Conn> conns = new CopyOnWriteArrayList<>();

  private CutProxy(String target) throws IOException {
    int i = target.lastIndexOf(':');
    host = target.substring(0, i);
    port = Integer.parseInt(target.substring(i + 1));
    server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    Thread t = new Thread(this::accept, "cut-proxy-accept");
    t.setDaemon(true);
    t.start();
  }

  static CutProxy start(String target) throws IOException {
    return new CutProxy(target);
  }

  String addr() {
    return "127.0.0.1:" + server.getLocalPort();
  }

  private void accept() {
    while (true) {
      Socket a;
      try {
        a = server.accept();
      } catch (IOException e) {
        return; // closed
      }
      try {
        Conn c = new Conn(a, new Socket(host, port));
        conns.add(c);
        pipe(c, c.a, c.b);
        pipe(c, c.b, c.a);
      } catch (IOException e) {
        closeQuietly(a);
      }
    }
  }

  private static void pipe(Conn c, Socket src, Socket dst) {
    Thread t = new Thread(() -> {
      byte[] buf = new byte[32 << 10];
      try {
        InputStream in = src.getInputStream();
        OutputStream out = dst.getOutputStream();
        for (int n; (n = in.read(buf)) >= 0; ) {
          if (!c.cut) {
            out.write(buf, 0, n);
            out.flush();
          }
        }
      } catch (IOException e) {
        // the connection ended
      }
      if (!c.cut) { // a cut passes no close either
        closeQuietly(dst);
      }
    }, "cut-proxy-pipe");
    t.setDaemon(true);
    t.start();
  }

  void cut() {
    for (Conn c : conns) {
      c.cut = true;
    }
  }

  @Override
  public void close() {
    closeQuietly(server);
    for (Conn c : conns) {
      closeQuietly(c.a);
      closeQuietly(c.b);
    }
  }

  private static void closeQuietly(AutoCloseable c) {
    try {
      c.close();
    } catch (Exception e) {
      // closing
    }
  }
}
