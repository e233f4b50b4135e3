// A provider host reached over HTTP/2: a few long-lived sessions that every request multiplexes
// over, as Apple and Google ask of senders (a new TLS connection per notification is what gets a
// sender throttled). node:http2 and not undici: undici 6's HTTP/2 client is experimental and
// failed an assertion under 200 concurrent streams here (docs/decisions/push-providers.md).
import { connect, constants, type ClientHttp2Session, type IncomingHttpHeaders } from "node:http2";

export interface OriginResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Why a request got no answer: the retry policy treats both as passing trouble. */
export class OriginUnreachable extends Error {
  constructor(
    readonly kind: "timeout" | "network",
    message: string,
  ) {
    super(message);
  }
}

const { HTTP2_HEADER_METHOD, HTTP2_HEADER_PATH, HTTP2_HEADER_STATUS, NGHTTP2_CANCEL } = constants;

/** How long closing waits for requests in flight before it cuts their connections. */
const closeGraceMs = 2_000;

export class Http2Origin {
  private readonly sessions: (ClientHttp2Session | undefined)[];
  private next = 0;
  private closed = false;

  constructor(
    readonly origin: string,
    connections: number,
    private readonly timeoutMs: number,
  ) {
    this.sessions = new Array<ClientHttp2Session | undefined>(connections).fill(undefined);
  }

  /** POSTs `body` to `path`; rejects with OriginUnreachable when no answer came. */
  post(path: string, headers: Record<string, string>, body: string): Promise<OriginResponse> {
    if (this.closed) return Promise.reject(new OriginUnreachable("network", `${this.origin} is closed`));
    const session = this.session();
    this.holdOpen(session, +1);
    return new Promise<OriginResponse>((resolve, reject) => {
      let settled = false;
      const fail = (error: () => OriginUnreachable) => {
        if (settled) return;
        settled = true;
        reject(error());
      };
      const stream = session.request({ [HTTP2_HEADER_METHOD]: "POST", [HTTP2_HEADER_PATH]: path, ...headers });
      stream.setTimeout(this.timeoutMs, () => {
        fail(() => new OriginUnreachable("timeout", `${this.origin} did not answer within ${this.timeoutMs} ms`));
        stream.close(NGHTTP2_CANCEL);
      });
      let responseHeaders: IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      stream.on("response", (received) => (responseHeaders = received));
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        if (settled) return;
        settled = true;
        resolve({ status: Number(responseHeaders[HTTP2_HEADER_STATUS]), headers: responseHeaders, body: Buffer.concat(chunks).toString("utf8") });
      });
      stream.on("error", (err: Error) => fail(() => new OriginUnreachable("network", `${this.origin}: ${err.message}`)));
      // A stream the peer reset or refused ends with 'close' and no 'end'.
      stream.on("close", () => fail(() => new OriginUnreachable("network", `${this.origin} closed the stream (code ${stream.rstCode})`)));
      stream.end(body);
    }).finally(() => this.holdOpen(session, -1));
  }

  /**
   * Ends every session once its streams finish, or cuts them after closeGraceMs: a provider that
   * holds its answers must not hold a stopping engine for a whole request timeout.
   */
  async close(): Promise<void> {
    this.closed = true;
    const open = this.sessions.filter((session): session is ClientHttp2Session => !!session && !session.closed && !session.destroyed);
    await Promise.all(
      open.map(
        (session) =>
          new Promise<void>((resolve) => {
            const cut = setTimeout(() => session.destroy(), closeGraceMs);
            session.close(() => {
              clearTimeout(cut);
              resolve();
            });
          }),
      ),
    );
  }

  /** A usable session, round robin over the slots; a slot whose session ended gets a new one. */
  private session(): ClientHttp2Session {
    const slot = this.next;
    this.next = (this.next + 1) % this.sessions.length;
    const existing = this.sessions[slot];
    if (existing && !existing.closed && !existing.destroyed) return existing;
    const session = connect(this.origin);
    const forget = () => {
      if (this.sessions[slot] === session) this.sessions[slot] = undefined;
    };
    // A session the provider ends (GOAWAY, an idle timeout, a reset connection) takes no new
    // streams; the next request opens another, and the streams it had fail on their own.
    session.on("goaway", forget);
    session.on("close", forget);
    session.on("error", forget);
    // An idle connection waits for work without keeping a stopping process alive; one with
    // requests in flight keeps it (holdOpen).
    session.unref();
    this.sessions[slot] = session;
    return session;
  }

  private readonly inFlight = new Map<ClientHttp2Session, number>();

  private holdOpen(session: ClientHttp2Session, change: 1 | -1): void {
    const count = (this.inFlight.get(session) ?? 0) + change;
    if (count === 0) {
      this.inFlight.delete(session);
      if (!session.destroyed) session.unref();
    } else {
      this.inFlight.set(session, count);
      if (count === 1 && change === 1) session.ref();
    }
  }
}
