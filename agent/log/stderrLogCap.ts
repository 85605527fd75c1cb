import * as fs from 'node:fs';

/**
 * Caps the agent's own log when its stderr is a regular file (the extension starts the agent with
 * stdout and stderr on `agent.log`; a shell may do `2>> agent.log`). The file is held by an O_APPEND
 * descriptor the agent cannot reopen, so it is rotated by copy-truncate: the content moves to
 * `<file>.1` (the previous generation is replaced) and the file is truncated; appends continue at the
 * new end. Checked on a timer, so the overshoot is what the agent logs in one period.
 */
export function capStderrLog(capBytes: number, periodMs = 5000): () => void {
  const target = stderrFile();
  if (target === null) return () => undefined;
  const check = () => {
    try {
      if (fs.fstatSync(2).size > capBytes) rotate(target);
    } catch {
      // The log is best effort: a failed rotation must not stop the agent.
    }
  };
  check();
  const timer = setInterval(check, periodMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** The path of stderr when it is a regular file of ours opened for append; null otherwise. */
function stderrFile(): string | null {
  try {
    const stat = fs.fstatSync(2);
    if (!stat.isFile() || stat.uid !== process.getuid?.()) return null;
    const flags = fs.readFileSync('/proc/self/fdinfo/2', 'utf8').match(/^flags:\s+([0-7]+)/m)?.[1];
    if (flags === undefined || (parseInt(flags, 8) & fs.constants.O_APPEND) === 0) return null;
    const target = fs.readlinkSync('/proc/self/fd/2');
    return target.startsWith('/') && !target.endsWith(' (deleted)') ? target : null;
  } catch {
    return null;
  }
}

function rotate(file: string): void {
  const mine = fs.fstatSync(2);
  const size = mine.size;
  // stderr is write-only: read the same file through its path, checked to be the same inode.
  const input = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  const temp = `${file}.1.tmp`;
  let out: number | null = null;
  try {
    const stat = fs.fstatSync(input);
    if (stat.ino !== mine.ino || stat.dev !== mine.dev) return;
    fs.rmSync(temp, { force: true });
    out = fs.openSync(temp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
    const buffer = Buffer.alloc(1024 * 1024);
    for (let offset = 0; offset < size;) {
      const read = fs.readSync(input, buffer, 0, Math.min(buffer.length, size - offset), offset);
      if (read === 0) break;
      fs.writeSync(out, buffer, 0, read);
      offset += read;
    }
  } finally {
    fs.closeSync(input);
    if (out !== null) fs.closeSync(out);
  }
  if (out === null) return;
  fs.renameSync(temp, `${file}.1`);
  fs.ftruncateSync(2, 0);
  const marker = `{"msg":"log rotated: earlier lines are in ${file}.1","bytes":${size}}\n`;
  fs.writeSync(2, marker);
}
