import type { Registry } from 'prom-client';

/**
 * The text of a registry whose values move only on known events (a run end, a published schedule):
 * formatted and encoded once per change, not once per scrape. A text formatted while a change came
 * is used once and not kept.
 */
export class KeptExposition {
  private text: string | null = null;
  private bytes: Buffer | null = null;
  private version = 0;

  constructor(readonly registry: Registry) {}

  /** Its values moved: the next scrape formats it again. */
  changed(): void {
    this.text = null;
    this.bytes = null;
    this.version += 1;
  }

  async textNow(): Promise<string> {
    if (this.text !== null) return this.text;
    const version = this.version;
    const text = await this.registry.metrics();
    if (version === this.version) this.text = text;
    return text;
  }

  /** The same text as UTF-8, for an HTTP answer. */
  async body(): Promise<Buffer> {
    const version = this.version;
    const text = await this.textNow();
    if (this.bytes !== null && version === this.version) return this.bytes;
    const bytes = Buffer.from(text, 'utf8');
    if (version === this.version && this.text === text) this.bytes = bytes;
    return bytes;
  }
}
