import * as fs from 'node:fs';
import * as path from 'node:path';

/** Data files a demo source keeps: the demo writes about 840 MB a day, and nothing else prunes it. */
export const DEMO_KEEP_FILES = 5;

/**
 * The simulated fetcher of the demo catalog: writes `rateMb` MB per second of data files into
 * DATA_DIR/<name> for `seconds`, printing progress like a real fetcher's log.
 */
export async function demoFetch(name: string, seconds: number, rateMb: number, dataDir: string): Promise<number> {
  const dir = path.join(dataDir, name);
  fs.mkdirSync(dir, { recursive: true });
  const tickMs = 200;
  const chunk = Buffer.alloc(Math.round((rateMb * 1024 * 1024 * tickMs) / 1000), 0x51);
  const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}.bin`);
  const ticks = Math.ceil((seconds * 1000) / tickMs);
  process.stdout.write(`demo fetcher ${name}: ${seconds} s at ${rateMb} MB/s into ${file}\n`);
  for (let i = 0; i < ticks; i++) {
    if (chunk.length > 0) fs.appendFileSync(file, chunk);
    if (i % 5 === 0) process.stdout.write(`${name}: ${((i * chunk.length) / 1024 / 1024).toFixed(1)} MB\n`);
    await new Promise((resolve) => setTimeout(resolve, tickMs));
  }
  const removed = pruneDemoOutput(dir, DEMO_KEEP_FILES);
  process.stdout.write(`${name}: done${removed > 0 ? `; removed ${removed} older data files (keeps the last ${DEMO_KEEP_FILES})` : ''}\n`);
  return 0;
}

/**
 * Like a real fetcher that replaces yesterday's download: keeps the newest `keep` data files of
 * this source (its own `*.bin` files, by name, which starts with the ISO time) and removes the rest.
 */
export function pruneDemoOutput(dir: string, keep: number): number {
  const files = fs
    .readdirSync(dir)
    .filter((f) => /^\d{4}-\d{2}-\d{2}T[\d-]+Z-\d+\.bin$/.test(f))
    .sort();
  let removed = 0;
  for (const f of files.slice(0, Math.max(0, files.length - keep))) {
    try {
      fs.unlinkSync(path.join(dir, f));
      removed++;
    } catch {
      // Removed by a run of the same source at the same moment.
    }
  }
  return removed;
}
