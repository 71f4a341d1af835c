// A throwaway PostgreSQL server for the idempotent tests: initdb into a
// temporary directory and postgres on a free port. Found in
// /usr/lib/postgresql/*/bin (Debian's postgresql package); as root it runs
// as the postgres user, as PostgreSQL refuses to run as root.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

import { eventually, freePort, tmpDir } from "./harness";

export function findPgBin(): string | undefined {
  const base = "/usr/lib/postgresql";
  if (!fs.existsSync(base)) return undefined;
  for (const v of fs.readdirSync(base).sort().reverse()) {
    const bin = path.join(base, v, "bin");
    if (fs.existsSync(path.join(bin, "initdb")) && fs.existsSync(path.join(bin, "postgres"))) return bin;
  }
  return undefined;
}

export class Postgres {
  private constructor(readonly url: string, private readonly proc: ChildProcess, readonly dir: string, private readonly data: string) {}

  static async start(bin: string): Promise<Postgres> {
    const dir = tmpDir("pg");
    const data = path.join(dir, "data");
    const asRoot = process.getuid?.() === 0;
    const run = (cmd: string, args: string[]) => (asRoot ? ["runuser", ["-u", "postgres", "--", cmd, ...args]] as const : [cmd, args] as const);
    if (asRoot) execFileSync("chown", ["postgres", dir]);
    const [c1, a1] = run(path.join(bin, "initdb"), ["-D", data, "-U", "spool", "--auth=trust", "-E", "UTF8", "--no-sync"]);
    execFileSync(c1, [...a1], { stdio: "ignore" });
    const port = await freePort();
    const [c2, a2] = run(path.join(bin, "postgres"), ["-D", data, "-p", String(port), "-k", dir, "-h", "127.0.0.1", "-c", "fsync=off"]);
    const proc = spawn(c2, [...a2], { stdio: "ignore" });
    const pg = new Postgres(`postgres://spool@127.0.0.1:${port}/postgres`, proc, dir, data);
    const { Client } = await import("pg");
    await eventually("postgres accepting connections", async () => {
      const c = new Client({ connectionString: pg.url });
      try {
        await c.connect();
        await c.end();
        return true;
      } catch {
        return false;
      }
    });
    return pg;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    // Signal the postmaster itself (runuser does not pass signals on): SIGINT is a fast shutdown.
    const pid = Number(fs.readFileSync(path.join(this.data, "postmaster.pid"), "utf8").split("\n")[0]);
    process.kill(pid, "SIGINT");
    await exited;
  }
}
