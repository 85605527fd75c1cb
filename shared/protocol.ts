// The agent's protocol: JSON-RPC 2.0 over a WebSocket. Both the agent and the extension import it;
// it must not import `vscode` or any Node-only module. Its two halves: the data it carries
// (protocolTypes.ts) and the messages, each with its schema, in one registry (messages.ts).

export * from './protocolTypes';
export * from './messages';
