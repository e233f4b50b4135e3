// The SDK's retry of calls answered UNAVAILABLE, through a front that answers chosen calls as an
// engine in the middle of a move does (the server's own error body, from errorBodyJson), and
// passes everything else to a real server.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectErrorOf, errorBodyJson } from "../../api/errors.js";
import { Errors } from "../../shared/errors.js";
import { errorDetailOf, retryDelayOf } from "../src/index.js";
import { startTestServer, type TestServer } from "../../test/support/harness.js";
import { signIn, type Person } from "./support/people.js";

interface Refusal {
  /** The method refused ("GetProfile"). */
  method: string;
  /** How many of its calls are refused before they pass. */
  times: number;
  metadata: Record<string, string>;
}

/** An HTTP front that refuses the calls `refusals` names with a 503 UNAVAILABLE and forwards the rest. */
class RefusingFront {
  readonly refusals: Refusal[] = [];
  /** When each refused or forwarded call of a method arrived (performance.now()). */
  readonly arrivals = new Map<string, number[]>();

  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static async start(target: string): Promise<RefusingFront> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const front = new RefusingFront(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    server.on("request", (req: IncomingMessage, res: ServerResponse) =>
      front.handle(target, req, res).catch((err: unknown) => {
        console.error("refusing front:", err);
        res.writeHead(502).end();
      }),
    );
    return front;
  }

  private async handle(target: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const method = (req.url ?? "").split("/").at(-1) ?? "";
    this.arrivals.set(method, [...(this.arrivals.get(method) ?? []), performance.now()]);
    const refusal = this.refusals.find((r) => r.method === method && r.times > 0);
    if (refusal) {
      refusal.times -= 1;
      res.writeHead(503, { "content-type": "application/json" }).end(errorBodyJson(Errors.unavailable, refusal.metadata));
      return;
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => !["host", "connection", "content-length", "transfer-encoding", "accept-encoding"].includes(name))) as Record<string, string>;
    const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body: chunks.length > 0 ? Buffer.concat(chunks) : undefined });
    // fetch undoes any content coding and reads the body whole: its length is the one sent on.
    const answerHeaders = Object.fromEntries([...answer.headers].filter(([name]) => !["content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"].includes(name)));
    res.writeHead(answer.status, answerHeaders).end(Buffer.from(await answer.arrayBuffer()));
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

describe("sdk: calls answered UNAVAILABLE", function () {
  let server: TestServer;
  let front: RefusingFront;
  let person: Person;
  before(async () => {
    server = await startTestServer();
    front = await RefusingFront.start(server.url);
    person = await signIn({ ...server, url: front.url } as TestServer);
  });
  after(async () => {
    await front.close();
    await server.dispose();
  });
  beforeEach(() => {
    front.refusals.length = 0;
    front.arrivals.clear();
  });

  it("sends a read again after the delay each answer names, and answers its result", async () => {
    front.refusals.push({ method: "GetProfile", times: 2, metadata: { reason: "ENGINE_NODE_LOST", retryAfterMs: "300" } });
    const { profile } = await person.client.user.getProfile({});
    expect(profile?.userId).to.equal(person.userId);
    const arrivals = front.arrivals.get("GetProfile")!;
    expect(arrivals).to.have.length(3);
    for (let i = 1; i < arrivals.length; i++) expect(arrivals[i] - arrivals[i - 1], `wait before send ${i + 1}`).to.be.at.least(290);
  });

  it("sends any call again that the answer says was never applied (the key's owner refused it)", async () => {
    front.refusals.push({ method: "UpdateProfile", times: 1, metadata: { reason: "OWNERSHIP_ELSEWHERE", shard: "7" } });
    await person.client.user.updateProfile({ nickname: "moved" });
    expect(front.arrivals.get("UpdateProfile")).to.have.length(2);
    expect((await person.client.user.getProfile({})).profile?.nickname).to.equal("moved");
  });

  it("hands a change that may have been applied to the application, unsent again", async () => {
    front.refusals.push({ method: "UpdateProfile", times: 1, metadata: { reason: "ENGINE_NODE_LOST" } });
    const err = await person.client.user.updateProfile({ nickname: "maybe" }).catch((error: unknown) => error);
    expect(err).to.be.instanceOf(ConnectError);
    expect((err as ConnectError).code).to.equal(Code.Unavailable);
    expect(errorDetailOf(err)?.metadata.reason).to.equal("ENGINE_NODE_LOST");
    // The server's own answer names the delay, which the application can honour itself.
    expect(retryDelayOf(err)).to.equal(250);
    expect(front.arrivals.get("UpdateProfile")).to.have.length(1);
  });

  it("gives up after maxAttempts sends, answering the last refusal; with retry off, after one", async () => {
    front.refusals.push({ method: "GetProfile", times: 100, metadata: { reason: "NO_ENGINE", retryAfterMs: "10" } });
    const err = await person.client.user.getProfile({}).catch((error: unknown) => error);
    expect((err as ConnectError).code).to.equal(Code.Unavailable);
    expect(front.arrivals.get("GetProfile")).to.have.length(5);

    front.arrivals.clear();
    const plain = await signIn({ ...server, url: front.url } as TestServer, { retry: false });
    front.arrivals.clear();
    await plain.client.user.getProfile({}).catch(() => undefined);
    expect(front.arrivals.get("GetProfile")).to.have.length(1);
  });

  it("reads a rate limit's delay in seconds, and names none for an answer that has none", () => {
    expect(retryDelayOf(connectErrorOf(Errors.codeRateLimited, { retryAfterSeconds: "3" }))).to.equal(3_000);
    expect(retryDelayOf(new ConnectError("slow down", Code.ResourceExhausted))).to.equal(undefined);
    expect(retryDelayOf(new Error("not an RPC error"))).to.equal(undefined);
  });
});
