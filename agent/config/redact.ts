/**
 * Hides the credentials of every URL in a text (`scheme://user:password@host` becomes
 * `scheme://***@host`), also in text that is not a valid URL: a configuration error must be able
 * to show what was wrong without showing the password.
 */
export function redactCredentials(text: string): string {
  // The userinfo of an authority ends at its last '@' before the path, query or fragment.
  return text.replace(/([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#\s]*)@/g, '$1***@');
}
