// HTTP spoken by hand over a TCP socket, so that requests no HTTP client would send (broken
// request lines, invalid headers, bodies that never finish) really reach the server.
import { connect, type Socket } from "node:net";

export interface RawAnswer {
  /** The status of the first final (not 1xx) response, undefined when none came. */
  status: number | undefined;
  /** The body of that response, de-chunked, as latin1 text. */
  body: string;
  /** Everything the server sent, as latin1 text. */
  text: string;
}

function dechunk(body: string): string {
  let out = "";
  let rest = body;
  for (;;) {
    const line = rest.indexOf("\r\n");
    const size = parseInt(rest.slice(0, line), 16);
    if (line < 0 || !(size > 0)) return out;
    out += rest.slice(line + 2, line + 2 + size);
    rest = rest.slice(line + 2 + size + 2);
  }
}

function answerOf(text: string): RawAnswer {
  let rest = text;
  for (;;) {
    const match = /^HTTP\/1\.[01] (\d{3}) /.exec(rest);
    const status = match ? Number(match[1]) : undefined;
    const end = rest.indexOf("\r\n\r\n");
    const head = end < 0 ? rest : rest.slice(0, end);
    const body = end < 0 ? "" : rest.slice(end + 4);
    // An interim answer (100 Continue) comes before the real one.
    if (status !== undefined && status < 200 && status !== 101) {
      rest = body;
      continue;
    }
    return { status, body: /\r\ntransfer-encoding: *chunked/i.test(head) ? dechunk(body) : body, text };
  }
}

export interface RawConnection {
  socket: Socket;
  /** Resolves when the server has closed the connection, with all it sent. */
  closed: Promise<RawAnswer>;
  /** Everything received so far. */
  received(): string;
}

/**
 * Opens a connection that collects what the server sends until it closes. `allowHalfOpen`: the
 * client goes on writing after the server ended its side (see exchangeWhileWriting).
 */
export async function openRaw(port: number, options: { allowHalfOpen?: boolean } = {}): Promise<RawConnection> {
  const socket = connect({ port, host: "127.0.0.1", allowHalfOpen: options.allowHalfOpen ?? false });
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  let text = "";
  socket.on("data", (data: Buffer) => (text += data.toString("latin1")));
  const closed = new Promise<RawAnswer>((resolve) => {
    // A reset from the server is an answer too (what it sent before stays readable).
    socket.on("error", () => undefined);
    socket.on("close", () => resolve(answerOf(text)));
  });
  return { socket, closed, received: () => text };
}

/** Whether `text` holds a whole final response (after any 100 Continue), so reading can stop. */
export function hasWholeResponse(text: string, headRequest: boolean): boolean {
  let rest = text;
  for (;;) {
    const end = rest.indexOf("\r\n\r\n");
    if (end < 0) return false;
    const head = rest.slice(0, end);
    const status = Number(/^HTTP\/1\.[01] (\d{3}) /.exec(head)?.[1]);
    const body = rest.slice(end + 4);
    if (status >= 100 && status < 200 && status !== 101) {
      rest = body;
      continue;
    }
    if (status === 101 || status === 204 || status === 304 || headRequest) return true;
    const length = /\r\ncontent-length: *(\d+)/i.exec(head);
    if (length) return body.length >= Number(length[1]);
    // The last chunk, then trailers (gRPC sends its status there), then an empty line.
    if (/\r\ntransfer-encoding: *chunked/i.test(head)) return /(?:^|\r\n)0\r\n(?:[^\r\n]+\r\n)*\r\n/.test(body);
    return false; // the body runs until the server closes
  }
}

/**
 * Sends one request and reads the first final response whole, then hangs up. A client that
 * half-closed instead would see Node drop the answers still in the making (it aborts the
 * requests of a connection whose peer has ended, unless told to allow half-open ones).
 */
export async function exchange(port: number, request: string | Uint8Array): Promise<RawAnswer> {
  const bytes = typeof request === "string" ? Buffer.from(request, "latin1") : Buffer.from(request);
  const connection = await openRaw(port);
  const headRequest = bytes.subarray(0, 5).toString("latin1") === "HEAD ";
  connection.socket.on("data", () => {
    if (hasWholeResponse(connection.received(), headRequest)) connection.socket.destroy();
  });
  connection.socket.write(bytes);
  return connection.closed;
}

export interface WrittenExchange extends RawAnswer {
  /** The head of the final response, as latin1 text ("" when none came). */
  head: string;
  /** The first error the socket reported (EPIPE, ECONNRESET), while writing or after. */
  socketError: string | undefined;
  /** Bytes of the request written (accepted by the socket) before it ended or failed. */
  written: number;
  /** Bytes of the request written when the first byte of an answer arrived; undefined when none did. */
  writtenWhenAnswered: number | undefined;
  /** Whether the client gave up at `waitMs`, still writing or still waiting for the answer. */
  timedOut: boolean;
}

/**
 * Sends one request as a client that reads while it writes does: the head, then `body`, in 64 KiB
 * writes, each waiting for the socket to take the one before, whatever arrives meanwhile; then it
 * reads until the answer is whole, the server closes, or `waitMs` passes. Unlike exchange(), it
 * does not stop writing once answered, so a server that answers early and stops reading (or
 * closes) shows up as an error or a write that never finishes. With `pauseAt`, it stops writing
 * once that many bytes are out until an answer begins to arrive (at most 5 s), and then writes the
 * rest: the answer is sure to come while the client is still sending.
 */
export async function exchangeWhileWriting(port: number, head: string, body: Uint8Array, options: { pauseAt?: number; waitMs?: number } = {}): Promise<WrittenExchange> {
  const { pauseAt, waitMs = 10_000 } = options;
  // nginx answers a body over its limit, then shuts its side down and reads past the rest
  // (lingering close): a client that ended its own side on that FIN, as Node does unless told to
  // allow half-open sockets, stopped writing part way (13.3 of 16.8 MB, now and then).
  const connection = await openRaw(port, { allowHalfOpen: true });
  const { socket } = connection;
  let socketError: string | undefined;
  let written = 0;
  let writtenWhenAnswered: number | undefined;
  let closed = false;
  socket.on("error", (err: NodeJS.ErrnoException) => (socketError ??= err.code ?? err.message));
  socket.once("data", () => (writtenWhenAnswered = written));
  socket.once("close", () => (closed = true));
  const deadline = Date.now() + waitMs;
  let timedOut = false;
  /** Resolves once the socket can take more, closes, or the time is up: false unless it can take more. */
  const writable = () =>
    new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        timedOut = true;
        settle(false);
      }, Math.max(0, deadline - Date.now()));
      const settle = (ok: boolean) => {
        clearTimeout(timer);
        socket.off("drain", onDrain);
        socket.off("close", onClose);
        resolve(ok);
      };
      const onDrain = () => settle(true);
      const onClose = () => settle(false);
      socket.on("drain", onDrain);
      socket.on("close", onClose);
    });
  const request = Buffer.concat([Buffer.from(head, "latin1"), body]);
  let paused = pauseAt === undefined;
  for (let offset = 0; offset < request.byteLength && !closed && socketError === undefined; ) {
    if (!paused && offset >= pauseAt!) {
      paused = true;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 5_000);
        const done = () => {
          clearTimeout(timer);
          resolve();
        };
        if (connection.received().length > 0) done();
        else socket.once("data", done).once("close", done);
      });
    }
    const part = request.subarray(offset, Math.min(offset + 65536, paused ? request.byteLength : pauseAt!));
    const more = socket.write(part);
    offset += part.byteLength;
    written = offset;
    if (!more && !(await writable())) break;
  }
  const headRequest = head.startsWith("HEAD ");
  if (!closed && !hasWholeResponse(connection.received(), headRequest)) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        timedOut = true;
        finish();
      }, Math.max(0, deadline - Date.now()));
      function finish() {
        clearTimeout(timer);
        socket.off("data", check);
        socket.off("close", finish);
        resolve();
      }
      function check() {
        if (hasWholeResponse(connection.received(), headRequest)) finish();
      }
      socket.on("data", check);
      socket.on("close", finish);
    });
  }
  socket.destroy();
  const answer = await connection.closed;
  const end = answer.text.indexOf("\r\n\r\n");
  return { ...answer, head: end < 0 ? "" : answer.text.slice(0, end), socketError, written, writtenWhenAnswered, timedOut };
}
