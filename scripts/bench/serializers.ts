// Which Moleculer serializer the mesh should use, measured on the packets a message sends between
// nodes: the api node's SendMessage call to the conversation's engine and its answer, the engine's
// appendFanOuts call to the engines owning the recipients' streams and their answers, and each
// gateway.deliver push with its answer. Each serializer is Moleculer's own class, as a broker
// would run it; the payloads are built by the code that builds them in the cluster (toWire,
// encodeEntry). Per packet kind: bytes and the CPU of one serialize plus one deserialize; then
// per private message and per 200-member group message (two engines, two gateways).
// Usage: tsx scripts/bench/serializers.ts [--iterations 20000]
import { create } from "@bufbuild/protobuf";
import moleculer from "moleculer";
import { SendMessageRequestSchema, SendMessageResponseSchema } from "../../shared/gen/api/v1/message_pb.js";
import { UserInfoSchema } from "../../shared/gen/shared/v1/common_pb.js";
import { MessageEnvelopeSchema, MessageType } from "../../shared/gen/shared/v1/message_pb.js";
import { toWire } from "../../shared/wire.js";
import { encodeEntry } from "../../engine/delivery/stream-entry.js";
import type { LiveEvent } from "../../shared/bus.js";

const iterationsAt = process.argv.indexOf("--iterations");
const iterations = iterationsAt > 0 ? Number(process.argv[iterationsAt + 1]) : 20_000;

const text = "Sure, I can look at it this afternoon. Send me the link when you have it.";
const body = { type: MessageType.TEXT, content: { case: "text" as const, value: { text } } };
const conversationId = 8_130_424_601_722_880n;
const envelope = create(MessageEnvelopeSchema, { conversationId, messageId: 4211n, senderId: 100_231, clientMessageId: 77n, body, createdAt: 1_764_400_000_000n });
const sender = toWire(UserInfoSchema, { userId: 100_231, nickname: "alice", avatarUrl: "https://cdn.example.com/a/100231.png" });
const entry = encodeEntry({ case: "messageEnvelope", value: envelope });
const update = { snUpdate: entry.wire, users: [sender] } as unknown as LiveEvent["update"];
const users = (count: number, from = 200_000) => Array.from({ length: count }, (_, i) => from + i);

/** A request packet's payload as Moleculer's transit builds it. */
const request = (action: string, params: unknown) => ({
  ver: "4",
  sender: "parley-api1",
  id: "5f1c2a8e-7b1d-4c55-9a3e-0b9d7c1e2f3a",
  action,
  params,
  meta: {},
  timeout: 30_000,
  level: 2,
  tracing: null,
  parentID: "6e2d3b9f-8c2e-4d66-ab4f-1cae8d2f3a4b",
  requestID: "7f3e4cad-9d3f-4e77-bc5a-2dbf9e3a4b5c",
  caller: "conversation",
  stream: false,
});
const response = (data: unknown) => ({ ver: "4", sender: "parley-engine1", id: "5f1c2a8e-7b1d-4c55-9a3e-0b9d7c1e2f3a", success: true, data, meta: {}, stream: false });
const fanOut = (recipients: number[]) => ({ fanOutId: "18446744073709551", entry, users: [sender], recipients });
const push = (recipients: number[]): LiveEvent => ({ update, recipients: recipients.map((userId, i) => [userId, 1_000 + i]) });

const packets = {
  sendMessage: request("messages.sendMessage", {
    caller: { kind: "user", userId: 100_231, deviceId: "c0ffee-device", sessionId: "9a8b7c" },
    request: toWire(SendMessageRequestSchema, { conversationId, clientMessageId: 77n, body }),
  }),
  sendMessageAnswer: response(toWire(SendMessageResponseSchema, { messageId: 4211n, createdAt: 1_764_400_000_000n })),
  appendPrivate: request("sync.appendFanOuts", { fanOuts: [fanOut([100_231, 100_232])] }),
  appendPrivateAnswer: response({ sns: [[[100_231, 5_120], [100_232, 4_877]]] }),
  appendGroupHalf: request("sync.appendFanOuts", { fanOuts: [fanOut(users(100))] }),
  appendGroupHalfAnswer: response({ sns: [users(100).map((userId, i) => [userId, 3_000 + i])] }),
  deliverPrivate: request("gateway.deliver", push([100_232])),
  deliverGroupHalf: request("gateway.deliver", push(users(100))),
  deliverAnswer: response(null),
} as const;
type Kind = keyof typeof packets;

/** The packets one message sends: a private one to a peer on another engine, a group's to 200 members over two engines and two gateways. */
const perMessage: Record<string, [Kind, number][]> = {
  private: [
    ["sendMessage", 1],
    ["sendMessageAnswer", 1],
    ["appendPrivate", 1],
    ["appendPrivateAnswer", 1],
    ["deliverPrivate", 2],
    ["deliverAnswer", 2],
  ],
  "group (200)": [
    ["sendMessage", 1],
    ["sendMessageAnswer", 1],
    ["appendGroupHalf", 2],
    ["appendGroupHalfAnswer", 2],
    ["deliverGroupHalf", 2],
    ["deliverAnswer", 2],
  ],
};

const broker = new moleculer.ServiceBroker({ logger: false });
const candidates: [string, () => moleculer.Serializer][] = [
  ["JSON", () => new moleculer.Serializers.JSON()],
  ["CBOR (cbor-x)", () => new moleculer.Serializers.CBOR()],
  ["Notepack", () => new moleculer.Serializers.Notepack()],
  ["MsgPack (msgpack5)", () => new moleculer.Serializers.MsgPack()],
];

/** A serializer whose package is installed, ready; undefined otherwise (Moleculer loads them on init). */
function ready(make: () => moleculer.Serializer): moleculer.Serializer | undefined {
  const serializer = make();
  const fatal = broker.fatal;
  try {
    broker.fatal = ((message: string) => {
      throw new Error(message);
    }) as typeof broker.fatal;
    serializer.init(broker);
    return serializer;
  } catch {
    return undefined;
  } finally {
    broker.fatal = fatal;
  }
}

const packetType = (kind: Kind) => (kind.endsWith("Answer") ? "RES" : "REQ");

function measure(serializer: moleculer.Serializer, kind: Kind): { bytes: number; ns: number } {
  const type = packetType(kind);
  const packet = packets[kind];
  const once = () => serializer.deserialize(serializer.serialize(structuredClone(packet) as never, type), type);
  for (let i = 0; i < iterations / 10; i++) once();
  const bytes = serializer.serialize(structuredClone(packet) as never, type).length;
  // The clone is timed apart and taken off: serializers may change the object they are given.
  const cloneStarted = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) structuredClone(packet);
  const cloneNs = Number(process.hrtime.bigint() - cloneStarted);
  const started = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) once();
  return { bytes, ns: Math.max(0, Number(process.hrtime.bigint() - started) - cloneNs) / iterations };
}

const results = new Map<string, Map<Kind, { bytes: number; ns: number }>>();
for (const [name, make] of candidates) {
  const serializer = ready(make);
  if (!serializer) {
    console.log(`${name}: its package is not installed; skipped`);
    continue;
  }
  results.set(name, new Map((Object.keys(packets) as Kind[]).map((kind) => [kind, measure(serializer, kind)])));
}

const names = [...results.keys()];
const cell = (value: string) => value.padStart(22);
console.log(`\nper packet: bytes / µs to serialize and deserialize (${iterations} times each)`);
console.log("packet".padEnd(24) + names.map(cell).join(""));
for (const kind of Object.keys(packets) as Kind[]) {
  console.log(kind.padEnd(24) + names.map((name) => cell(`${results.get(name)!.get(kind)!.bytes} B / ${(results.get(name)!.get(kind)!.ns / 1000).toFixed(2)}`)).join(""));
}
console.log("\nper message: bytes / µs over the mesh, and µs against JSON");
console.log("message".padEnd(24) + names.map(cell).join(""));
for (const [message, parts] of Object.entries(perMessage)) {
  const total = (name: string) =>
    parts.reduce(
      (sum, [kind, count]) => {
        const one = results.get(name)!.get(kind)!;
        return { bytes: sum.bytes + one.bytes * count, ns: sum.ns + one.ns * count };
      },
      { bytes: 0, ns: 0 },
    );
  const json = total("JSON");
  console.log(message.padEnd(24) + names.map((name) => cell(`${total(name).bytes} B / ${(total(name).ns / 1000).toFixed(1)} (${(total(name).ns / json.ns).toFixed(2)}×)`)).join(""));
}
