export async function runCli(argv: string[]): Promise<number> {
  console.log('quantilica: not yet', argv.join(' '));
  return Promise.resolve(0);
}
