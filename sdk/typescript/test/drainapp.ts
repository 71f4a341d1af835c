// A consumer process for the drain test: records "start <id> <attempt>" when
// a handler begins and "done <id>" just before it returns (and the SDK acks).
// It stops on SIGTERM (shutdownSignals) and records "exit" after the drain.
import * as fs from "node:fs";

import { Client } from "@spoolmq/spool";

async function main(): Promise<void> {
  const [addr, record, holdMs] = process.argv.slice(2);
  const rec = (line: string) => fs.appendFileSync(record!, line + "\n");
  const c = await Client.connect(addr);
  await c.subscribe({
    group: "workers",
    topics: ["orders"],
    concurrency: 4,
    prefetch: 8,
    shutdownSignals: ["SIGTERM"],
    handler: async (m) => {
      rec(`start ${m.id} ${m.attempt}`);
      await new Promise((r) => setTimeout(r, Number(holdMs)));
      rec(`done ${m.id}`);
    },
  });
  rec("exit");
  await c.close();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
