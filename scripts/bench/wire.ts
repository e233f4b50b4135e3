// The load generator's side of the wire, kept cheap because it shares the machine with the
// server: Connect unary calls in binary protobuf over undici keep-alive connections, WebSocket
// pushes in binary frames, recognised by a byte search for the operation's marker.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Pool } from "undici";
import WebSocket from "ws";
import { ClientFrameSchema, ClientFrameType, ServerFrameSchema } from "../../shared/gen/api/v1/gateway_pb.js";
import { PushStreamDeltaRequestSchema, SendMessageRequestSchema } from "../../shared/gen/api/v1/message_pb.js";
import { MessageType } from "../../shared/gen/shared/v1/message_pb.js";
import { markerIdAt, markerOffset, type PushSink, type Tracker } from "./load.js";

export const paths = {
  sendMessage: "/api.v1.MessageService/SendMessage",
  pushStreamDelta: "/api.v1.MessageService/PushStreamDelta",
  getProfile: "/api.v1.UserService/GetProfile",
} as const;

export type Headers = Record<string, string>;
export const protoHeaders = (token: string): Headers => ({
  "content-type": "application/proto",
  "connect-protocol-version": "1",
  authorization: `Bearer ${token}`,
});

/** Failed requests: the first few are printed, so a broken run is visible rather than just fast. */
let failuresPrinted = 0;
function reportFailure(text: string): void {
  if (failuresPrinted++ < 5) console.error(`bench: ${text}`);
}

export class RpcClient {
  private readonly pool: Pool;
  constructor(baseUrl: string, connections: number) {
    this.pool = new Pool(baseUrl, { connections, pipelining: 1 });
  }

  /**
   * Posts a unary call; resolves whether it answered 200. Uses undici's handler interface rather
   * than `request()`, which would build a body stream per response: the client stays cheaper.
   */
  post(path: string, headers: Headers, body: Uint8Array): Promise<boolean> {
    return new Promise((resolve) => {
      let status = 0;
      let errorText = "";
      this.pool.dispatch(
        { method: "POST", path, headers, body },
        {
          onConnect: () => undefined,
          onHeaders: (statusCode) => {
            status = statusCode;
            return true;
          },
          onData: (chunk) => {
            if (status !== 200) errorText += chunk.toString();
            return true;
          },
          onComplete: () => {
            if (status !== 200) reportFailure(`${path} answered ${status}: ${errorText.slice(0, 300)}`);
            resolve(status === 200);
          },
          onError: (err) => {
            reportFailure(`${path} failed: ${err.message}`);
            resolve(false);
          },
        },
      );
    });
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

let clientMessageIds = 0n;
export function sendMessageBody(conversationId: bigint, text: string): Uint8Array {
  clientMessageIds += 1n;
  return toBinary(
    SendMessageRequestSchema,
    create(SendMessageRequestSchema, { conversationId, clientMessageId: clientMessageIds, body: { type: MessageType.TEXT, content: { case: "text", value: { text } } } }),
  );
}

export function streamDeltaBody(conversationId: bigint, messageId: bigint, seq: number, delta: string): Uint8Array {
  return toBinary(PushStreamDeltaRequestSchema, create(PushStreamDeltaRequestSchema, { conversationId, messageId, seq, delta }));
}

const pingFrame = toBinary(ClientFrameSchema, create(ClientFrameSchema, { requestId: 2n, type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } }));

/** Routes every push received on the benchmark's sockets to the phase's tracker. */
export class PushRouter implements PushSink {
  tracker: Tracker | undefined;
  receive(data: Buffer, socket: number): void {
    const tracker = this.tracker;
    if (!tracker) return;
    const at = markerOffset(data);
    if (at >= 0) tracker.arrived(data, at, markerIdAt(data, at), socket, performance.now());
  }
}

const opened = (socket: WebSocket) =>
  new Promise<void>((resolve, reject) => {
    socket.once("open", resolve);
    socket.once("error", reject);
  });

/** Opens a gateway socket and authenticates it in binary form (so pushes come as protobuf). */
export async function openGatewaySocket(wsUrl: string, token: string): Promise<WebSocket> {
  const socket = new WebSocket(wsUrl, { perMessageDeflate: false });
  await opened(socket);
  const answer = new Promise<Buffer>((resolve, reject) => {
    socket.once("message", resolve);
    socket.once("close", (code, reason) => reject(new Error(`gateway closed the socket before answering auth: ${code} ${reason}`)));
  });
  socket.send(toBinary(ClientFrameSchema, create(ClientFrameSchema, { requestId: 1n, type: ClientFrameType.AUTH_REQUEST, payload: { case: "authRequest", value: { token } } })));
  const frame = fromBinary(ServerFrameSchema, new Uint8Array(await answer));
  if (frame.payload.case !== "authResponse" || !frame.payload.value.success) throw new Error(`gateway refused the token: ${JSON.stringify(frame.payload.value)}`);
  socket.on("error", (err) => console.error("bench: gateway socket error", err.message));
  return socket;
}

/** Sends a heartbeat on each socket every 30 s, as clients are asked to, so the gateway keeps them. */
export function keepAlive(sockets: WebSocket[]): () => void {
  const timer = setInterval(() => {
    for (const socket of sockets) if (socket.readyState === WebSocket.OPEN) socket.send(pingFrame);
  }, 30_000);
  return () => clearInterval(timer);
}

export async function openRelaySocket(relayUrl: string, id: number): Promise<WebSocket> {
  const socket = new WebSocket(`${relayUrl}/?id=${id}`, { perMessageDeflate: false });
  await opened(socket);
  return socket;
}

/** The relay's header: how many recipients, then their socket ids. */
export function relayHeader(recipients: number[]): Buffer {
  const header = Buffer.allocUnsafe(2 + 4 * recipients.length);
  header.writeUInt16LE(recipients.length, 0);
  recipients.forEach((id, i) => header.writeUInt32LE(id, 2 + 4 * i));
  return header;
}

export async function closeAll(sockets: WebSocket[]): Promise<void> {
  await Promise.all(
    sockets.map((socket) => {
      if (socket.readyState === WebSocket.CLOSED) return undefined;
      const closed = new Promise((r) => socket.once("close", r));
      socket.close();
      return closed;
    }),
  );
}
