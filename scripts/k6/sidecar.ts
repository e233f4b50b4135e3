// What a k6 scenario cannot do inside k6, served to it over loopback HTTP by `npm run k6`:
// - the verification codes the server writes to CODE_FILE (k6 reads files only while it starts, and
//   codes are written as the scenario signs in): `GET /code?identity=<value>&purpose=login`;
// - an HTTPS webhook receiver that checks every delivery's signature (both header sets) with the
//   secret key the scenario registers for its agent, and counts what arrived:
//   `POST /agents {"agentUserId","secretKey"}` registers, `GET /webhooks` answers the counts,
//   `GET /webhooks/seen?agent=<id>&message=<id>` when a message first arrived.
import { closeSync, existsSync, openSync, readSync, statSync } from "node:fs";
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { checkWebhookSignature, webhookHeaderSets } from "@parley/sdk";

interface DeliveredCode {
  identityValue: string;
  purpose: string;
  code: string;
}

/** The codes of a CODE_DELIVERY=file: file, read as it grows (only what was appended since the last look). */
export class CodeFile {
  private readOffset = 0;
  private partialLine = "";
  private readonly latest = new Map<string, string>();

  constructor(private readonly path: string) {}

  code(identityValue: string, purpose: string): string | undefined {
    this.readAppended();
    return this.latest.get(`${purpose}\n${identityValue}`);
  }

  private readAppended(): void {
    if (!existsSync(this.path)) return;
    const size = statSync(this.path).size;
    // A file replaced by a shorter one (a server restarted on a fresh data directory) is read anew.
    if (size < this.readOffset) [this.readOffset, this.partialLine] = [0, ""];
    if (size === this.readOffset) return;
    const buffer = Buffer.alloc(size - this.readOffset);
    const fd = openSync(this.path, "r");
    try {
      this.readOffset += readSync(fd, buffer, 0, buffer.length, this.readOffset);
    } finally {
      closeSync(fd);
    }
    const lines = (this.partialLine + buffer.toString("utf8")).split("\n");
    this.partialLine = lines.pop() ?? "";
    for (const line of lines) {
      if (line.trim() === "") continue;
      const delivered = JSON.parse(line) as DeliveredCode;
      this.latest.set(`${delivered.purpose}\n${delivered.identityValue}`, delivered.code);
    }
  }
}

export interface WebhookCounts {
  /** Requests whose both signatures matched the agent's registered key and whose timestamp was fresh. */
  valid: number;
  /** Requests with a missing, wrong or stale signature, or for an agent nobody registered. */
  invalid: number;
  /** Distinct messages delivered with a valid signature (a retried delivery counts once). */
  distinctMessages: number;
  /** The server's reachability checks (`{}`, before the webhook is accepted). */
  probes: number;
}

export class WebhookReceiver {
  private readonly secretKeys = new Map<number, string>();
  /** When each message first arrived with a valid signature, by agent and message id. */
  private readonly seenMessages = new Map<string, number>();
  private valid = 0;
  private invalid = 0;
  private probes = 0;

  register(agentUserId: number, secretKey: string): void {
    this.secretKeys.set(agentUserId, secretKey);
  }

  counts(): WebhookCounts {
    return { valid: this.valid, invalid: this.invalid, distinctMessages: this.seenMessages.size, probes: this.probes };
  }

  /** Judges one delivery to /hook/<agentUserId>; answers the HTTP status to reply with. */
  receive(agentUserId: number, headers: IncomingMessage["headers"], rawBody: string, nowSeconds = Math.floor(Date.now() / 1000)): number {
    const secretKey = this.secretKeys.get(agentUserId);
    // Stricter than an agent, which takes either set: the server must send both, each valid.
    const signed =
      secretKey !== undefined &&
      webhookHeaderSets.every(
        (set) => checkWebhookSignature(secretKey, String(headers[set.timestamp] ?? ""), String(headers[set.signature] ?? ""), rawBody, { nowSeconds }) === undefined,
      );
    if (!signed) {
      this.invalid += 1;
      return 401;
    }
    // The reachability check of a configuration, signed like any delivery with the key the agent
    // holds (from CreateAgent, before SetAgentConfig answers a new one): an empty update.
    if (rawBody.trim() === "{}") {
      this.probes += 1;
      return 200;
    }
    this.valid += 1;
    const messageId = messageIdOf(rawBody);
    const key = `${agentUserId}:${messageId}`;
    if (messageId !== undefined && !this.seenMessages.has(key)) this.seenMessages.set(key, Date.now());
    return 200;
  }

  /** When the message first reached the agent's endpoint (Unix ms), if it did. */
  seenAt(agentUserId: number, messageId: string): number | undefined {
    return this.seenMessages.get(`${agentUserId}:${messageId}`);
  }
}

function messageIdOf(rawBody: string): string | undefined {
  const update = JSON.parse(rawBody) as { snUpdate?: { messageEnvelope?: { messageId?: string } }; nonSnUpdate?: { messageEnvelope?: { messageId?: string } } };
  return update.snUpdate?.messageEnvelope?.messageId ?? update.nonSnUpdate?.messageEnvelope?.messageId;
}

export interface Sidecar {
  /** The control address k6 talks to: http://127.0.0.1:<port>. */
  url: string;
  /** The webhook base URL agents are pointed at (https://localhost:<port>/hook), when TLS was given. */
  webhookUrl: string | undefined;
  close(): Promise<void>;
}

const maxBodyBytes = 1 << 20;

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    request.on("data", (chunk: Buffer) => {
      length += chunk.length;
      if (length > maxBodyBytes) request.destroy(new Error("body too large"));
      else chunks.push(chunk);
    });
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    request.on("error", reject);
  });
}

function answer(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { "content-type": "application/json" });
  response.end(JSON.stringify(body));
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
  });
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

export async function startSidecar(options: { codeFile: string; tls?: { key: Buffer; cert: Buffer } }): Promise<Sidecar> {
  const codes = new CodeFile(options.codeFile);
  const receiver = new WebhookReceiver();

  const control = createHttpServer((request, response) => {
    void (async () => {
      const url = new URL(request.url ?? "/", "http://sidecar");
      if (request.method === "GET" && url.pathname === "/code") {
        const code = codes.code(url.searchParams.get("identity") ?? "", url.searchParams.get("purpose") ?? "login");
        return code === undefined ? answer(response, 404, { error: "no code yet" }) : answer(response, 200, { code });
      }
      if (request.method === "POST" && url.pathname === "/agents") {
        const { agentUserId, secretKey } = JSON.parse(await readBody(request)) as { agentUserId: number; secretKey: string };
        if (!Number.isInteger(agentUserId) || typeof secretKey !== "string" || secretKey === "") return answer(response, 400, { error: "agentUserId and secretKey are needed" });
        receiver.register(agentUserId, secretKey);
        return answer(response, 200, {});
      }
      if (request.method === "GET" && url.pathname === "/webhooks") return answer(response, 200, receiver.counts());
      if (request.method === "GET" && url.pathname === "/webhooks/seen") {
        const seenAt = receiver.seenAt(Number(url.searchParams.get("agent")), url.searchParams.get("message") ?? "");
        return seenAt === undefined ? answer(response, 404, { error: "not delivered yet" }) : answer(response, 200, { seenAt });
      }
      answer(response, 404, { error: `no ${request.method} ${url.pathname}` });
    })().catch((err: unknown) => answer(response, 400, { error: String(err) }));
  });
  const controlPort = await listen(control);

  let hooks: Server | undefined;
  let webhookUrl: string | undefined;
  if (options.tls) {
    hooks = createHttpsServer({ key: options.tls.key, cert: options.tls.cert }, (request, response) => {
      void readBody(request)
        .then((rawBody) => {
          const agentUserId = Number(/^\/hook\/(\d+)$/.exec(request.url ?? "")?.[1] ?? Number.NaN);
          response.writeHead(receiver.receive(agentUserId, request.headers, rawBody)).end();
        })
        .catch(() => response.writeHead(400).end());
    });
    webhookUrl = `https://localhost:${await listen(hooks)}/hook`;
  }

  return {
    url: `http://127.0.0.1:${controlPort}`,
    webhookUrl,
    async close() {
      await Promise.all([close(control), hooks ? close(hooks) : Promise.resolve()]);
    },
  };
}
