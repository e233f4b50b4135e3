import { createHash, randomBytes } from "node:crypto";
import { expect } from "chai";
import { MediaService } from "../shared/gen/api/v1/media_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { signInWithCode, type SignedIn } from "./support/accounts.js";
import { client, describeFrontOfOneProcess, startTestServer, type TestServer, testSocketDriver } from "./support/harness.js";
import { openRaw, type RawConnection } from "./support/raw-http.js";
import { GatewayClient } from "./support/ws-client.js";

const headersTimeoutMs = 300;
const requestTimeoutMs = 500;
/** Comfortably past both limits and the sweep that enforces them. */
const pastTheLimits = 4 * requestTimeoutMs;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once what the connection received satisfies `done`. */
function until(connection: RawConnection, done: (text: string) => boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (done(connection.received())) {
        connection.socket.off("data", check);
        resolve();
      }
    };
    connection.socket.on("data", check);
    connection.socket.once("close", () => (done(connection.received()) ? resolve() : reject(new Error("closed before the answer was whole"))));
    check();
  });
}

describeFrontOfOneProcess("HTTP request timeouts", () => {
  let server: TestServer;
  let user: SignedIn;
  before(async () => {
    server = await startTestServer({ http: { headersTimeoutMs, requestTimeoutMs }, topology: "single" });
    user = await signInWithCode(server);
    await client(server, UserService, "json", user.accessToken).updateProfile({ nickname: "Patient" });
  });
  after(async () => server.dispose());

  const nickname = async () => (await client(server, UserService, "json", user.accessToken).getProfile({})).profile?.nickname;
  const head = (length: number) =>
    `POST /api.v1.UserService/UpdateProfile HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${user.accessToken}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

  it("cuts off a request whose body stops coming (408, connection closed) and runs nothing of it", async () => {
    const connection = await openRaw(server.port);
    connection.socket.write(head(100) + '{"nickname":"Slow');
    const answer = await connection.closed;
    expect(answer.status).to.equal(408);
    expect(await nickname()).to.equal("Patient");
  });

  it("cuts off a body that trickles in, although bytes keep arriving", async () => {
    const body = JSON.stringify({ nickname: "Trickle", signature: "x".repeat(1000) });
    const connection = await openRaw(server.port);
    connection.socket.write(head(body.length));
    let sent = 0;
    const trickle = setInterval(() => {
      if (sent < body.length) connection.socket.write(body[sent++]);
    }, 20);
    const answer = await connection.closed;
    clearInterval(trickle);
    expect(answer.status).to.equal(408);
    expect(sent, "bytes sent before the cut").to.be.below(body.length);
    expect(await nickname()).to.equal("Patient");
  });

  // uWS times a request's headers itself (about 10 s, not settable) and closes unanswered.
  it(testSocketDriver === "ws" ? "cuts off headers that trickle in (408)" : "cuts off headers that trickle in (uWS: closed unanswered)", async () => {
    const connection = await openRaw(server.port);
    connection.socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n");
    const trickle = setInterval(() => connection.socket.write("X-Slow: 1\r\n"), 20);
    const answer = await connection.closed;
    clearInterval(trickle);
    expect(answer.status).to.equal(testSocketDriver === "ws" ? 408 : undefined);
  });

  it("keeps an idle keep-alive connection usable past the limits", async () => {
    const connection = await openRaw(server.port);
    const answers = (text: string) => text.split("HTTP/1.1 200 OK").length - 1;
    connection.socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    // The whole answer: its body, chunked (node:http) or not (uWS).
    await until(connection, (text) => answers(text) === 1 && /ok\n(?:\r\n0\r\n\r\n)?$/.test(text));
    await sleep(pastTheLimits);
    connection.socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    await until(connection, (text) => answers(text) === 2);
    connection.socket.destroy();
  });

  it("keeps a WebSocket open past the limits", async () => {
    const ws = await GatewayClient.connect(server.url, "json");
    expect((await ws.authenticate(user.accessToken)).payload.case).to.equal("authResponse");
    await sleep(pastTheLimits);
    expect((await ws.ping()).payload.case).to.equal("heartbeatPong");
    ws.close();
  });

  it("lets a download run past the limits while the client reads slowly", async () => {
    const data = randomBytes(16_000_000);
    const api = client(server, MediaService, "binary", user.accessToken);
    const { sessionId } = await api.initUpload({ fileName: "big.bin", contentType: "application/octet-stream", size: BigInt(data.length) });
    for (let offset = 0; offset < data.length; offset += 8_000_000) {
      await api.uploadChunk({ sessionId, offset: BigInt(offset), chunk: data.subarray(offset, offset + 8_000_000) });
    }
    const { file } = await api.completeUpload({ sessionId });
    const url = new URL((await api.getDownloadURL({ fileId: file!.fileId })).url);

    const connection = await openRaw(server.port);
    const received: Buffer[] = [];
    connection.socket.removeAllListeners("data");
    connection.socket.on("data", (chunk: Buffer) => received.push(chunk));
    connection.socket.write(`GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
    await new Promise((resolve) => connection.socket.once("data", resolve));
    // Far more than the socket buffers hold stays unsent while this client does not read.
    connection.socket.pause();
    await sleep(pastTheLimits);
    connection.socket.resume();
    await connection.closed;
    const response = Buffer.concat(received);
    const body = response.subarray(response.indexOf("\r\n\r\n") + 4);
    expect(response.subarray(0, 15).toString()).to.equal("HTTP/1.1 200 OK");
    expect(body.length).to.equal(data.length);
    expect(createHash("sha256").update(body).digest("hex")).to.equal(createHash("sha256").update(data).digest("hex"));
  });

  it("still serves normal requests", async () => {
    await client(server, UserService, "json", user.accessToken).updateProfile({ nickname: "Done" });
    expect(await nickname()).to.equal("Done");
  });
});
