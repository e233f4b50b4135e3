// A real WebSocket client speaking the gateway's frames in JSON text or protobuf binary.
import { create, fromBinary, fromJson, toBinary, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import WebSocket from "ws";
import { ClientFrameSchema, ClientFrameType, ServerFrameSchema, type ServerFrame } from "../../shared/gen/api/v1/gateway_pb.js";
import type { WireMode } from "./harness.js";

export class GatewayClient {
  readonly frames: ServerFrame[] = [];
  private waiters: { predicate: (f: ServerFrame) => boolean; resolve: (f: ServerFrame) => void }[] = [];
  closed: Promise<{ code: number; reason: string }>;
  private nextRequestId = 1n;

  private constructor(
    readonly socket: WebSocket,
    readonly mode: WireMode,
  ) {
    socket.on("message", (data: Buffer, isBinary: boolean) => {
      const frame = isBinary ? fromBinary(ServerFrameSchema, new Uint8Array(data)) : fromJson(ServerFrameSchema, JSON.parse(data.toString("utf8")));
      this.frames.push(frame);
      this.waiters = this.waiters.filter((w) => {
        if (!w.predicate(frame)) return true;
        w.resolve(frame);
        return false;
      });
    });
    this.closed = new Promise((resolve) => socket.on("close", (code, reason) => resolve({ code, reason: reason.toString() })));
  }

  static async connect(baseUrl: string, mode: WireMode): Promise<GatewayClient> {
    const socket = new WebSocket(baseUrl.replace(/^http/, "ws") + "/ws");
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve());
      socket.once("error", reject);
    });
    return new GatewayClient(socket, mode);
  }

  send(frame: MessageInitShape<typeof ClientFrameSchema>): bigint {
    const requestId = frame.requestId ?? this.nextRequestId++;
    const full = { ...frame, requestId };
    const message = create(ClientFrameSchema, full);
    if (this.mode === "binary") this.socket.send(toBinary(ClientFrameSchema, message));
    else this.socket.send(JSON.stringify(toJson(ClientFrameSchema, message)));
    return requestId;
  }

  /** Resolves with the first frame (already received or future) that matches. */
  next(predicate: (f: ServerFrame) => boolean, timeoutMs = 5000): Promise<ServerFrame> {
    const seen = this.frames.find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no matching frame arrived in time")), timeoutMs);
      this.waiters.push({
        predicate,
        resolve: (f) => {
          clearTimeout(timer);
          resolve(f);
        },
      });
    });
  }

  async authenticate(token: string): Promise<ServerFrame> {
    const requestId = this.send({ type: ClientFrameType.AUTH_REQUEST, payload: { case: "authRequest", value: { token } } });
    return this.next((f) => f.requestId === requestId);
  }

  /** Sends a heartbeat ping and resolves with its pong; for an agent this confirms the frames it had. */
  async ping(): Promise<ServerFrame> {
    const requestId = this.send({ type: ClientFrameType.HEARTBEAT_PING, payload: { case: "heartbeatPing", value: {} } });
    return this.next((f) => f.requestId === requestId && f.payload.case === "heartbeatPong");
  }

  /** Sn values of the sequenced updates pushed so far, in arrival order. */
  pushedSns(): number[] {
    return this.frames.flatMap((f) => (f.payload.case === "update" && f.payload.value.update.case === "snUpdate" ? [f.payload.value.update.value.sn] : []));
  }

  close(): void {
    this.socket.close();
  }

  /** Drops the TCP connection without a close handshake, as a dead network looks to the server. */
  terminate(): void {
    this.socket.terminate();
  }
}

/** The authenticated sockets a suite opened, closed together when it ends. */
export class OpenSockets {
  private readonly sockets: GatewayClient[] = [];

  constructor(
    private readonly server: () => { url: string },
    private readonly mode: WireMode = "binary",
  ) {}

  /** A socket authenticated with the token (a user's or an agent's). */
  async authenticated(token: string): Promise<GatewayClient> {
    const socket = await GatewayClient.connect(this.server().url, this.mode);
    this.sockets.push(socket);
    await socket.authenticate(token);
    return socket;
  }

  closeAll(): void {
    for (const socket of this.sockets.splice(0)) socket.close();
  }
}
