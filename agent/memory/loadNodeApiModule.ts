/**
 * Loads a Node-API module the build makes (dist/*.node) and returns the functions named, bound to
 * it; throws when it cannot be loaded or lacks one of them. Its callers turn that into "not here".
 */
export function loadNodeApiModule<T extends string>(file: string, names: readonly T[]): Record<T, (...args: unknown[]) => unknown> {
  const module = { exports: {} as Record<string, unknown> };
  process.dlopen(module, file);
  const loaded = module.exports;
  const missing = names.filter((name) => typeof loaded[name] !== 'function');
  if (missing.length > 0) throw new Error(`not the expected exports (no ${missing.join(', ')})`);
  return Object.fromEntries(names.map((name) => [name, (loaded[name] as (...args: unknown[]) => unknown).bind(loaded)])) as Record<
    T,
    (...args: unknown[]) => unknown
  >;
}
