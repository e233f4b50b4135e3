// Who is making a request, as the API tier established it from the bearer token.
export interface Caller {
  kind: "user" | "agent";
  userId: number;
  /** The device session of a user token; empty for agents. */
  deviceId: string;
}

/** What an engine action that serves an RPC receives: the caller, the request and request facts. */
export interface RpcParams {
  caller?: Caller;
  request: import("./wire.js").WireMessage;
  /** The client address as the API tier determined it. */
  clientIp?: string;
  /** The Host the client addressed, for URLs handed back when no public URL is configured. */
  host?: string;
}
