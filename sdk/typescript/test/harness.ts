// Test harness: a real spoold built from this repository (SPOOLD, or built
// once into build/spoold), real redis-server processes, free ports, and
// eventually() instead of sleeps.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

import { adminClient, type AdminServiceClient } from "@spoolmq/spool";

export const PKG_DIR = path.resolve(__dirname, "..", "..");
export const REPO_DIR = path.resolve(PKG_DIR, "..", "..");

let spooldBin: string | undefined;

/** The spoold binary: $SPOOLD, else built once from the repository into build/spoold. */
export function spoold(): string {
  if (spooldBin) return spooldBin;
  if (process.env.SPOOLD) return (spooldBin = process.env.SPOOLD);
  const out = path.join(PKG_DIR, "build", "spoold");
  execFileSync("go", ["build", "-o", out, "./cmd/spoold"], { cwd: REPO_DIR, stdio: "inherit" });
  return (spooldBin = out);
}

/**
 * The ports [lo, hi) free ports are picked from: below the kernel's ephemeral
 * range (Linux: 32768-60999), whose ports any outgoing connection may take as
 * its local port. A port from listen(0) is an ephemeral one: between the close
 * and spoold's or redis-server's bind, a connection on the machine may take it
 * ("address already in use"). Above the range when there is no room below it.
 */
function portWindow(): [number, number] {
  let [start, end] = [32768, 60999];
  try {
    const f = fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (f.length === 2 && f.every(Number.isInteger)) [start, end] = f;
  } catch {
    // not Linux: 32768 is below macOS's range too
  }
  if (start - 10000 >= 1000) return [10000, start];
  if (65536 - (end + 1) >= 1000) return [end + 1, 65536];
  throw new Error(`the ephemeral port range ${start}-${end} leaves no room for test servers: narrow it (sysctl net.ipv4.ip_local_port_range)`);
}

function listenOn(port: number): Promise<net.Server | undefined> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once("error", () => resolve(undefined));
    s.listen(port, "127.0.0.1", () => resolve(s));
  });
}

/** n distinct ports on 127.0.0.1 that are free now, outside the ephemeral range (see portWindow); each is held until all are found. */
export async function freePorts(n: number): Promise<number[]> {
  const [lo, hi] = portWindow();
  const held: net.Server[] = [];
  const ports: number[] = [];
  try {
    for (let i = 0; i < 200 && ports.length < n; i++) {
      const port = lo + Math.floor(Math.random() * (hi - lo));
      const s = await listenOn(port);
      if (!s) continue;
      held.push(s);
      ports.push(port);
    }
  } finally {
    await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
  }
  if (ports.length < n) throw new Error(`found ${ports.length} of ${n} free ports in ${lo}-${hi - 1} on 127.0.0.1`);
  return ports;
}

export async function freePort(): Promise<number> {
  return (await freePorts(1))[0];
}

/** Polls cond every 20 ms until it holds, or fails after timeoutMs saying what was awaited. */
export async function eventually(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function tmpDir(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `spool-ts-${prefix}-`));
}

function httpStatus(url: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.get(url, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", () => resolve(0));
    req.setTimeout(1000, () => req.destroy());
  });
}

/** A running spoold. */
export class Node {
  app = "";
  admin = "";
  proc: ChildProcess | undefined;
  private exited: Promise<number | null> = Promise.resolve(null);
  readonly dir: string;
  readonly logPath: string;

  private constructor(private readonly args: (n: Node) => string[]) {
    this.dir = tmpDir("spoold");
    this.logPath = path.join(this.dir, "spoold.log");
  }

  /** spoold --config with this YAML (without the node section), on a fresh data dir, with extra flags (e.g. --dev). */
  static async start(config: string, extra: string[] = []): Promise<Node> {
    const n = new Node((n) => ["--config", path.join(n.dir, "spool.yaml"), ...extra]);
    const [app, admin] = await freePorts(2);
    n.app = `127.0.0.1:${app}`;
    n.admin = `127.0.0.1:${admin}`;
    const full = `node:\n  id: ts\n  data_dir: ${path.join(n.dir, "data")}\n  app_listen: [${JSON.stringify(n.app)}]\n  admin_listen: ${JSON.stringify(n.admin)}\n  drain_timeout: 5s\n` + config;
    fs.writeFileSync(path.join(n.dir, "spool.yaml"), full);
    await n.run();
    return n;
  }

  /** spoold --dev (topic "demo", group "demo-app") on free ports. */
  static async dev(): Promise<Node> {
    const n = new Node((n) => ["--dev", "--app-listen", n.app, "--admin-listen", n.admin]);
    const [app, admin] = await freePorts(2);
    n.app = `127.0.0.1:${app}`;
    n.admin = `127.0.0.1:${admin}`;
    await n.run();
    return n;
  }

  private async run(): Promise<void> {
    const log = fs.openSync(this.logPath, "a");
    const p = spawn(spoold(), this.args(this), { stdio: ["ignore", log, log] });
    fs.closeSync(log);
    this.proc = p;
    this.exited = new Promise((r) => p.once("exit", (code) => r(code)));
    let gone = false;
    void this.exited.then(() => (gone = true));
    await eventually("spoold ready", async () => {
      if (gone) throw new Error(`spoold exited during start-up:\n${this.log()}`);
      return (await httpStatus(`http://${this.admin}/readyz`)) === 200;
    });
  }

  log(): string {
    try {
      return fs.readFileSync(this.logPath, "utf8").split("\n").slice(-60).join("\n");
    } catch {
      return "";
    }
  }

  /** SIGTERM and wait for a graceful exit (code 0). */
  async stop(): Promise<void> {
    if (!this.proc || this.proc.exitCode !== null) return;
    this.proc.kill("SIGTERM");
    const code = await Promise.race([this.exited, new Promise<string>((r) => setTimeout(() => r("timeout"), 20_000))]);
    if (code !== 0) throw new Error(`spoold after SIGTERM: exit ${code}\n${this.log()}`);
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.run();
  }

  async kill(): Promise<void> {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill("SIGKILL");
    await this.exited;
  }

  adminClient(): AdminServiceClient {
    return adminClient(this.admin);
  }
}

/** A redis-server on a free port, without persistence. */
export class Redis {
  private constructor(readonly addr: string, private readonly proc: ChildProcess) {}

  static async start(): Promise<Redis> {
    const port = await freePort();
    const dir = tmpDir("redis");
    const p = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
    const r = new Redis(`127.0.0.1:${port}`, p);
    await eventually("redis-server answering PING", () => ping(port));
    return r;
  }

  stop(): void {
    this.proc.kill("SIGKILL");
  }
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    s.on("error", () => resolve(false));
    s.on("connect", () => s.write("PING\r\n"));
    s.on("data", (b) => {
      s.destroy();
      resolve(b.toString().startsWith("+PONG"));
    });
  });
}

/** Promisifies a unary AdminService call. */
export function call<Req, Res>(fn: (req: Req, cb: (err: Error | null, res?: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(err) : resolve(res!))));
}
