// Keepalive against a real spoold: a cut connection is noticed.
import { strict as assert } from "node:assert";
import * as net from "node:net";
import { test } from "node:test";

import { Client, Stats } from "@spoolmq/spool";
import { Node, eventually } from "./harness";

/**
 * Forwards TCP connections to target until cut(): then the connections open
 * at that moment stop forwarding both ways without closing (what arrives is
 * read and dropped, as a network that loses every packet would, past the
 * kernel's acknowledgements), and pass no close on. Later connections are
 * forwarded as before.
 */
class CutProxy {
  private readonly server: net.Server;
  private readonly open: { cut: boolean; a: net.Socket; b: net.Socket }[] = [];
  constructor(private readonly target: { host: string; port: number }) {
    this.server = net.createServer((a) => {
      const b = net.connect(this.target);
      const c = { cut: false, a, b };
      this.open.push(c);
      const pipe = (src: net.Socket, dst: net.Socket) => {
        src.on("data", (d) => { if (!c.cut) dst.write(d); });
        src.on("close", () => { if (!c.cut) dst.destroy(); });
        src.on("error", () => {});
      };
      pipe(a, b);
      pipe(b, a);
    });
  }
  listen(): Promise<string> {
    return new Promise((resolve) => this.server.listen(0, "127.0.0.1", () => resolve(`127.0.0.1:${(this.server.address() as net.AddressInfo).port}`)));
  }
  cut(): void {
    for (const c of this.open) c.cut = true;
  }
  close(): void {
    this.server.close();
    for (const c of this.open) { c.a.destroy(); c.b.destroy(); }
  }
}

test("a cut connection is noticed within the keepalive and the subscription reconnects", async () => {
  const n = await Node.start(`
topics:
  - name: orders
    partitions: 1
subscriptions:
  - topic: orders
    group: workers
`);
  const [host, port] = n.app.split(":");
  const proxy = new CutProxy({ host, port: Number(port) });
  const c = new Client(await proxy.listen());
  const direct = await Client.connect(n.app);
  const ac = new AbortController();
  const stats = new Stats();
  const handled = new Set<string>();
  const done = c.subscribe({ group: "workers", topics: ["orders"], handler: async (m) => { handled.add(m.id); }, signal: ac.signal, shutdownSignals: [], stats, reconnectBackoff: { baseMs: 20, maxMs: 200 } });
  try {
    await direct.publishBatch("orders", [{ id: "before", payload: "x" }]);
    await eventually("the message published before the cut handled", () => handled.has("before"));
    const cut = Date.now();
    proxy.cut();
    // KEEPALIVE_OPTIONS: a ping after 10 s without a frame, 3 s for its answer.
    await eventually("the subscription reconnected after the cut", () => stats.reconnects >= 1, 10_000 + 3_000 + 2_000);
    console.log(`reconnected ${((Date.now() - cut) / 1000).toFixed(1)} s after the cut`);
    assert.ok(stats.reconnects >= 1);
  } finally {
    ac.abort();
    await done;
    c.close();
    direct.close();
    proxy.close();
    await n.kill();
  }
});
