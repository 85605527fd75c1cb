import * as fs from 'node:fs';
import { GITHUB_REPO } from '../catalog/catalog';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';

/** `owner/name` list from --repos or --repos-file (one a line, # comments); bad input changes nothing. */
export function parseRepos(list: string | undefined, file: string | undefined): string[] | null {
  if (list !== undefined && file !== undefined) throw usage('give --repos or --repos-file, not both');
  let items: string[];
  if (list !== undefined) items = list.split(',');
  else if (file !== undefined) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw usage(`--repos-file ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    items = text.split('\n').map((l) => l.replace(/#.*/, ''));
  } else return null;
  const repos = [...new Set(items.map((s) => s.trim()).filter((s) => s !== ''))];
  const bad = repos.filter((r) => !GITHUB_REPO.test(r));
  if (bad.length > 0) throw usage(`not a repository (owner/name): ${bad.map((b) => JSON.stringify(b)).join(', ')}`);
  if (repos.length === 0) throw usage('no repositories given');
  return repos;
}

const usage = (message: string) => new ClientError(0, ExitCode.usage, message);
