/** `/repos/{owner}/{repo}` with both parts encoded: the prefix of every path of one repository. */
export function repoPath(repo: string): string {
  const [owner, name] = repo.split('/');
  return `/repos/${encodeURIComponent(owner)}/${encodeURIComponent(name)}`;
}
