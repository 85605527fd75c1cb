import type { MessageTransports } from 'vscode-languageclient/node';
import { WebSocket, type RawData } from 'ws';
import { wsText } from '../agent/client/wsText';
import { readConnectionFile } from '../agent/server/connectionFile';
import type { ConnectionInfo } from '../shared/protocol';
import { TextMessageReader, TextMessageWriter } from '../shared/textMessageTransport';

export interface AgentTransport {
  info: ConnectionInfo;
  socket: WebSocket;
  transports: MessageTransports;
}

/** Snapshots with many runs are large; what the extension sends is small. */
const MAX_PAYLOAD = 64 * 1024 * 1024;

/**
 * Opens the WebSocket to the agent named by the connection file (checked: owner, mode 0600, no
 * symlink) and wraps it as vscode-languageclient's MessageTransports. The socket is opened here,
 * before any LanguageClient exists, so "no agent" is an ordinary rejection the session handles
 * quietly instead of a language-client start failure with its own popups.
 */
export async function openAgentTransport(connectionFile: string, handshakeTimeoutMs = 5000): Promise<AgentTransport> {
  const info = await readConnectionFile(connectionFile);
  const socket = await new Promise<WebSocket>((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${info.port}/`, {
      headers: { Authorization: `Bearer ${info.token}` },
      maxPayload: MAX_PAYLOAD,
      perMessageDeflate: false,
      handshakeTimeout: handshakeTimeoutMs,
    });
    ws.once('open', () => { ws.removeAllListeners('error'); resolve(ws); });
    ws.once('unexpected-response', (_req, res) => {
      ws.removeAllListeners('error');
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => { body += chunk; });
      res.on('end', () => reject(new Error(`the agent on port ${info.port} refused the connection (${res.statusCode}): ${body.trim()}`)));
    });
    ws.once('error', (err) => reject(new Error(`no agent answers on port ${info.port} (${err.message}); the connection file ${connectionFile} may be left from an agent that stopped`)));
  });
  const reader = new TextMessageReader((_code, error) => reader.failed(new Error(`the agent sent a bad frame: ${error}`)));
  const writer = new TextMessageWriter((text) => new Promise((resolve, reject) => {
    if (socket.readyState !== WebSocket.OPEN) {
      reject(new Error('the connection to the agent is closed'));
      return;
    }
    socket.send(text, (err) => (err ? reject(err) : resolve()));
  }));
  socket.on('message', (data: RawData) => reader.receive(wsText(data)));
  socket.on('error', (err) => reader.failed(err));
  socket.on('close', () => {
    reader.closed();
    writer.closed();
  });
  return { info, socket, transports: { reader, writer, detached: true } };
}
