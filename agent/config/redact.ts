/**
 * Hides the credentials of every URL in a text (`scheme://user:password@host` becomes
 * `scheme://***@host`), also in text that is not a valid URL: a configuration error must be able
 * to show what was wrong without showing the password.
 *
 * A password may carry unencoded `/`, `#`, `?` (or `@`), so the userinfo is taken to end at the LAST
 * `@` of the URL's word, not at the first character that would end an authority: hiding part of the
 * host or path is harmless, showing part of a password is not.
 */
export function redactCredentials(text: string): string {
  return text.replace(/([A-Za-z][A-Za-z0-9+.-]*:\/\/)\S*@/g, '$1***@');
}

/**
 * The same for the whole text of a secret setting: everything between the scheme and the value's last
 * `@` goes, also when the password holds spaces; a value that is no URL at all (a token, a password)
 * is not shown, beyond what follows a last `@`.
 */
export function redactSecretValue(value: string): string {
  const scheme = /^\s*[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(value)?.[0] ?? '';
  const at = value.lastIndexOf('@');
  if (at >= scheme.length) return `${scheme}***${value.slice(at)}`;
  return value === '' ? '' : scheme === '' ? '***' : value;
}
