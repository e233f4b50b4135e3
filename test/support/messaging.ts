// Shared helpers of the messaging tests: message bodies, update-stream snapshots and readers for
// what a WebSocket client received.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { SyncService } from "../../shared/gen/api/v1/sync_pb.js";
import type { ServerFrame } from "../../shared/gen/api/v1/gateway_pb.js";
import { MessageType, type MessageBodySchema, type MessageEnvelope, type StreamContent } from "../../shared/gen/shared/v1/message_pb.js";
import type { NonSnUpdate, SnUpdate } from "../../shared/gen/shared/v1/updates_pb.js";
import type { SignedIn } from "./accounts.js";
import { client, type TestServer, type WireMode } from "./harness.js";
import type { GatewayClient } from "./ws-client.js";

export type BodyInit = MessageInitShape<typeof MessageBodySchema>;

export const textBody = (text: string, entities: NonNullable<Extract<BodyInit["content"], { case: "text" }>["value"]["entities"]> = []): BodyInit => ({
  type: MessageType.TEXT,
  content: { case: "text", value: { text, entities } },
});
export const markdownBody = (rawMarkdown: string): BodyInit => ({ type: MessageType.MARKDOWN, content: { case: "markdown", value: { rawMarkdown } } });
export const cardBody = (cardJson: string, fallbackText = ""): BodyInit => ({ type: MessageType.CARD, content: { case: "card", value: { cardJson, fallbackText } } });
export const streamStartBody = (contentType = "text/plain"): BodyInit => ({ type: MessageType.STREAM, content: { case: "stream", value: { contentType } } });

let clientMessageIds = 1_000_000n;
/** A clientMessageId not used before in this test process. */
export const nextClientMessageId = () => clientMessageIds++;

export const textOf = (envelope: MessageEnvelope | undefined) => (envelope?.body?.content.case === "text" ? envelope.body.content.value.text : undefined);
export const streamOf = (envelope: MessageEnvelope | undefined): StreamContent | undefined =>
  envelope?.body?.content.case === "stream" ? envelope.body.content.value : undefined;

/** Reads users' update streams from a remembered position. */
export class StreamWatch {
  private constructor(
    private readonly server: TestServer,
    private readonly mode: WireMode,
    private readonly bases: Map<SignedIn, number>,
  ) {}

  /** Remembers each user's latest sn. */
  static async of(server: TestServer, mode: WireMode, users: SignedIn[]): Promise<StreamWatch> {
    const bases = new Map<SignedIn, number>();
    for (const user of users) bases.set(user, (await client(server, SyncService, mode, user.accessToken).getCurrentState({})).state!.latestSn);
    return new StreamWatch(server, mode, bases);
  }

  /** The entries appended to the user's stream since the snapshot, in order (every page). */
  async entries(user: SignedIn): Promise<SnUpdate[]> {
    const sync = client(this.server, SyncService, this.mode, user.accessToken);
    const found: SnUpdate[] = [];
    let sn = this.bases.get(user);
    if (sn === undefined) throw new Error("user not in the snapshot");
    for (;;) {
      const page = await sync.getDifference({ sn });
      if (page.updateTooLong) throw new Error("updateTooLong while reading a test stream");
      found.push(...page.updates);
      sn = page.sn;
      if (!page.hasMore) return found;
    }
  }

  /** The kinds of the entries appended since the snapshot, in order. */
  async kinds(user: SignedIn): Promise<(SnUpdate["update"]["case"])[]> {
    return (await this.entries(user)).map((entry) => entry.update.case);
  }
}

/** The update carried by a frame, if it is one. */
export function updateOf(frame: ServerFrame) {
  return frame.payload.case === "update" ? frame.payload.value : undefined;
}

/** The sequenced entries a socket received, in arrival order. */
export function pushedSnUpdates(ws: GatewayClient): SnUpdate[] {
  return ws.frames.flatMap((frame) => {
    const update = updateOf(frame);
    return update?.update.case === "snUpdate" ? [update.update.value] : [];
  });
}

/** The ephemeral entries a socket received, in arrival order. */
export function pushedNonSnUpdates(ws: GatewayClient): NonSnUpdate[] {
  return ws.frames.flatMap((frame) => {
    const update = updateOf(frame);
    return update?.update.case === "nonSnUpdate" ? [update.update.value] : [];
  });
}

/** Message envelopes a socket received, sequenced or ephemeral, for one message. */
export function pushedEnvelopes(ws: GatewayClient, kind: "snUpdate" | "nonSnUpdate", messageId?: bigint): MessageEnvelope[] {
  const entries = kind === "snUpdate" ? pushedSnUpdates(ws) : pushedNonSnUpdates(ws);
  return entries.flatMap((entry) =>
    entry.update.case === "messageEnvelope" && (messageId === undefined || entry.update.value.messageId === messageId) ? [entry.update.value] : [],
  );
}

/** Waits until the condition holds (socket deliveries are asynchronous). */
export async function eventually(condition: () => boolean, what = "the condition", timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} did not hold in time`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Every update of the user's stream from sn 0, page by page (GetDifference). */
export async function wholeStream(server: { url: string }, user: SignedIn): Promise<SnUpdate[]> {
  const sync = client(server, SyncService, "json", user.accessToken);
  const updates: SnUpdate[] = [];
  let sn = 0;
  for (;;) {
    const page = await sync.getDifference({ sn });
    updates.push(...page.updates);
    sn = page.sn;
    if (!page.hasMore) return updates;
  }
}
