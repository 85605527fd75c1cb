import * as v8 from 'node:v8';

/**
 * Keeps V8's young generation at the size it has when this is called: a burst's objects die young,
 * and semi-spaces grown for them (16 MB each by default) stay committed after the burst.
 */
export function keepYoungGenerationSmall(): void {
  v8.setFlagsFromString('--semi-space-growth-factor=1');
}

// The long-lived agent (`quantilica agent`) keeps it small from its first module on: main.ts imports
// this module before any other. The bundle's other modules, evaluated next, already grow it to twice
// its starting size, and a young generation grown before the setting still grew to four times it
// under a burst: 8 MB of the agent's RSS after a burst instead of 2. A CLI's heap ends with it.
if (process.argv[2] === 'agent') keepYoungGenerationSmall();
