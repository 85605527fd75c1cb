import type { CancellationToken, Disposable, LanguageClient } from 'vscode-languageclient/node';
import type { NotificationType, RequestType, RequestType0 } from 'vscode-jsonrpc';

// Calls to the agent typed by the constants of shared/messages.ts. vscode-languageclient 9 carries
// its own copy of vscode-jsonrpc (8.2.0) beside the one shared/ and the agent use: its `sendRequest`
// neither accepts the other copy's RequestType (a private member makes the classes distinct) nor
// could use it (it compares parameter-structure objects by identity). So the constant gives the
// types and its method name travels.

export function sendRequest<P, R>(client: LanguageClient, type: RequestType<P, R, void>, params: P, token?: CancellationToken): Promise<R> {
  // With a method name, vscode-jsonrpc counts the arguments as params: an `undefined` token passed on
  // would turn the params into a positional array.
  return token === undefined ? client.sendRequest<R>(type.method, params) : client.sendRequest<R>(type.method, params, token);
}

export function sendRequest0<R>(client: LanguageClient, type: RequestType0<R, void>): Promise<R> {
  return client.sendRequest<R>(type.method);
}

export function onNotification<P>(client: LanguageClient, type: NotificationType<P>, handler: (params: P) => void): Disposable {
  return client.onNotification(type.method, handler);
}
