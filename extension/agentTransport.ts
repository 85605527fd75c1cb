import type { MessageTransports } from 'vscode-languageclient/node';
import { WebSocket, type RawData } from 'ws';
import { wsText } from '../shared/node/wsText';
import { readLiveConnectionFile } from '../shared/node/connectionFile';
import { openAgentSocket } from '../shared/node/agentSocket';
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
 * symlink; the process it names is the live agent; the agent proves it knows the token before the
 * extension sends anything) and wraps it as vscode-languageclient's MessageTransports. The socket is opened here,
 * before any LanguageClient exists, so "no agent" is an ordinary rejection the session handles
 * quietly instead of a language-client start failure with its own popups.
 */
export async function openAgentTransport(connectionFile: string, handshakeTimeoutMs = 5000): Promise<AgentTransport> {
  // A stale file (its agent gone, the pid reused) is "no agent", before anything is sent anywhere.
  const info = await readLiveConnectionFile(connectionFile);
  const socket = await openAgentSocket(info, { handshakeTimeoutMs, maxPayload: MAX_PAYLOAD });
  const reader = new TextMessageReader((_code, error) => reader.failed(new Error(`the agent sent a bad frame: ${error}`)));
  const writer = new TextMessageWriter(
    (text) =>
      new Promise((resolve, reject) => {
        if (socket.readyState !== WebSocket.OPEN) {
          reject(new Error('the connection to the agent is closed'));
          return;
        }
        socket.send(text, (err) => (err ? reject(err) : resolve()));
      }),
  );
  socket.on('message', (data: RawData) => reader.receive(wsText(data)));
  socket.on('error', (err) => reader.failed(err));
  socket.on('close', () => {
    reader.closed();
    writer.closed();
  });
  return { info, socket, transports: { reader, writer, detached: true } };
}
