/** The API refused the token (401): no other request of the sync can succeed, so the sync stops. */
export class UnauthorizedError extends Error {
  readonly reason = 'unauthorized';
  constructor() {
    super('the GitHub API refused the token (401)');
    this.name = 'UnauthorizedError';
  }
}
