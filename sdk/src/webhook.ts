// Receiving webhooks as an agent: the signature check and a Node request listener built on it.
//
// Parley signs each webhook with the agent's secret key: HMAC-SHA256 over the timestamp header's
// value, a dot, and the raw body, sent as `sha256=<lowercase hex>`. It sends the pair twice, as
// X-Service-Timestamp / X-Service-Signature and as X-Nexus-Timestamp / X-Nexus-Signature (the
// names agents built on the upstream SDKs check). Either pair is accepted, each taken whole: a
// timestamp from one pair is never checked against the other pair's signature. The comparison
// takes constant time, so response timing reveals nothing about the expected signature, and a
// timestamp more than five minutes from the local clock is refused, so a captured request cannot
// be replayed later.
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { fromJsonString } from "@bufbuild/protobuf";
import { UpdateSchema, type Update } from "../../shared/gen/api/v1/updates_pb.js";
import { UpdateSequencer, type UpdateHandlers } from "./update-sequencer.js";

/** The default limit on a webhook's age (and on how far ahead of the local clock it may be). */
export const webhookMaxAgeSeconds = 5 * 60;

/** The header pairs a webhook may be signed under, in the order they are looked for. */
export const webhookHeaderSets = [
  { name: "parley", timestamp: "x-service-timestamp", signature: "x-service-signature" },
  { name: "nexus", timestamp: "x-nexus-timestamp", signature: "x-nexus-signature" },
] as const;

export interface WebhookSignature {
  timestamp: string;
  signature: string;
  /** Which header pair carried it. */
  headerSet: (typeof webhookHeaderSets)[number]["name"];
}

/** Node's request headers, or anything with a case-insensitive get() (the Fetch API's Headers). */
export type HeaderSource = IncomingHttpHeaders | { get(name: string): string | null };

function header(headers: HeaderSource, name: string): string | undefined {
  if (typeof headers.get === "function") return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  const value = (headers as IncomingHttpHeaders)[name];
  return typeof value === "string" ? value : undefined;
}

/** The first header pair present in full, or undefined when neither is. */
export function webhookSignatureOf(headers: HeaderSource): WebhookSignature | undefined {
  for (const set of webhookHeaderSets) {
    const timestamp = header(headers, set.timestamp);
    const signature = header(headers, set.signature);
    if (timestamp !== undefined && signature !== undefined) return { timestamp, signature, headerSet: set.name };
  }
  return undefined;
}

export type WebhookRejection = "missing-signature" | "bad-timestamp" | "stale-timestamp" | "bad-signature";

export interface SignatureCheckOptions {
  /** The local clock, Unix seconds. */
  nowSeconds?: number;
  maxAgeSeconds?: number;
}

function bytesOf(body: string | Uint8Array): Uint8Array {
  return typeof body === "string" ? Buffer.from(body, "utf8") : body;
}

function hmacOf(secretKey: string, timestamp: string, rawBody: string | Uint8Array): Buffer {
  return createHmac("sha256", secretKey).update(`${timestamp}.`).update(bytesOf(rawBody)).digest();
}

/** Why a signed request is refused, or undefined when its signature and timestamp hold. */
export function checkWebhookSignature(
  secretKey: string,
  timestamp: string,
  signature: string,
  rawBody: string | Uint8Array,
  options: SignatureCheckOptions = {},
): WebhookRejection | undefined {
  if (!/^\d{1,12}$/.test(timestamp)) return "bad-timestamp";
  const nowSeconds = options.nowSeconds ?? Math.floor(Date.now() / 1000);
  if (Math.abs(nowSeconds - Number(timestamp)) > (options.maxAgeSeconds ?? webhookMaxAgeSeconds)) return "stale-timestamp";
  const hex = signature.startsWith("sha256=") ? signature.slice("sha256=".length) : "";
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return "bad-signature";
  return timingSafeEqual(hmacOf(secretKey, timestamp, rawBody), Buffer.from(hex, "hex")) ? undefined : "bad-signature";
}

/** Whether the signature and timestamp of a request hold. */
export function verifySignature(secretKey: string, timestamp: string, signature: string, rawBody: string | Uint8Array, options: SignatureCheckOptions = {}): boolean {
  return checkWebhookSignature(secretKey, timestamp, signature, rawBody, options) === undefined;
}

export type WebhookVerification = { ok: true; update: Update } | { ok: false; reason: WebhookRejection | "bad-body" };

/** Checks a webhook request as received and decodes its Update. */
export function verifyWebhook(secretKey: string, headers: HeaderSource, rawBody: string | Uint8Array, options: SignatureCheckOptions = {}): WebhookVerification {
  const signed = webhookSignatureOf(headers);
  if (!signed) return { ok: false, reason: "missing-signature" };
  const rejection = checkWebhookSignature(secretKey, signed.timestamp, signed.signature, rawBody, options);
  if (rejection) return { ok: false, reason: rejection };
  try {
    return { ok: true, update: fromJsonString(UpdateSchema, Buffer.from(bytesOf(rawBody)).toString("utf8"), { ignoreUnknownFields: true }) };
  } catch {
    return { ok: false, reason: "bad-body" };
  }
}

/** The headers Parley would send with this body: for tests of an agent and local tools. */
export function signWebhook(secretKey: string, rawBody: string | Uint8Array, nowSeconds = Math.floor(Date.now() / 1000)): Record<string, string> {
  const timestamp = String(nowSeconds);
  const signature = "sha256=" + hmacOf(secretKey, timestamp, rawBody).toString("hex");
  return {
    "content-type": "application/json",
    "x-service-timestamp": timestamp,
    "x-service-signature": signature,
    "x-nexus-timestamp": timestamp,
    "x-nexus-signature": signature,
  };
}

export interface WebhookHandlerOptions extends UpdateHandlers {
  /** The agent's secret key; a function when it can change (a reconfigured webhook issues a new one). */
  secretKey: string | (() => string);
  /** The last sn the agent handled: entries at or below it are not handed over again. */
  initialSn?: number;
  maxAgeSeconds?: number;
  /** Larger bodies are refused with 413 (default 1 MiB). */
  maxBodyBytes?: number;
}

export interface WebhookHandler {
  (req: IncomingMessage, res: ServerResponse): void;
  /** The last sn handed to onUpdate. */
  readonly lastSn: number;
  /** Resolves once every accepted webhook has been handled. */
  idle(): Promise<void>;
}

/** Whether a body is an Update that carries no entry. */
function isEmptyUpdate(rawBody: Buffer): boolean {
  try {
    return fromJsonString(UpdateSchema, rawBody.toString("utf8"), { ignoreUnknownFields: true }).update.case === undefined;
  } catch {
    return false;
  }
}

/**
 * A request listener for an agent's webhook endpoint (node:http or node:https createServer).
 * Verified requests are answered 200 at once (the server waits at most 5 s) and handled after;
 * others get 401. Delivery is at least once and in order per agent, so entries arrive through
 * the same sequencing as on a WebSocket: in sn order, each sn once, one handler at a time.
 */
export function createWebhookHandler(options: WebhookHandlerOptions): WebhookHandler {
  const secretKey = typeof options.secretKey === "function" ? options.secretKey : () => options.secretKey as string;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const sequencer = new UpdateSequencer({
    initialSn: options.initialSn ?? 0,
    handlers: options,
    onCatchUpFailed: (err) => options.onError?.(err),
  });
  const epoch = sequencer.connected();
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "POST") {
      res.writeHead(405, { allow: "POST" }).end();
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    req.on("data", (chunk: Buffer) => {
      if (refused) return;
      size += chunk.length;
      if (size > maxBodyBytes) {
        refused = true;
        res.writeHead(413, { connection: "close" }).end();
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => {
      if (refused) return;
      const rawBody = Buffer.concat(chunks);
      const verified = verifyWebhook(secretKey(), req.headers, rawBody, { maxAgeSeconds: options.maxAgeSeconds });
      if (!verified.ok) {
        // Configuring a webhook, the server first checks that the URL answers, with a request
        // signed by the secret key it issues in the same call's answer: the agent cannot know the
        // key yet. That request carries no entry, so acknowledging it unverified reveals and
        // changes nothing.
        res.writeHead(isEmptyUpdate(rawBody) ? 200 : 401).end();
        return;
      }
      res.writeHead(200).end();
      sequencer.pushed(epoch, verified.update);
    });
  };
  Object.defineProperties(listener, {
    lastSn: { get: () => sequencer.lastSn },
    idle: { value: () => sequencer.idle() },
  });
  return listener as WebhookHandler;
}
