import * as fs from 'node:fs';
import * as path from 'node:path';

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
  process.stdout.write(`${name}: done\n`);
  return 0;
}
