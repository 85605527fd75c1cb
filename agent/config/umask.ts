let original: number | null = null;

/**
 * Makes everything this process creates private (umask 077: state, spool, logs, status files) and
 * remembers the umask it was started with, which fetchers get back for their own data.
 */
export function makeFilesPrivate(): void {
  const previous = process.umask(0o077);
  original ??= previous;
}

/** The umask the process started with, as octal text (`0022`). */
export function fetcherUmask(): string {
  return (original ?? process.umask()).toString(8).padStart(4, '0');
}
