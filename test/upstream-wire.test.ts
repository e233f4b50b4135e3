// Binary compatibility with the upstream protocol (pinealctx/nexus-proto v0.0.12): every message,
// field, oneof and enum value upstream has must carry upstream's number and type in the generated
// descriptors. The facts are test/fixtures/nexus-proto-v0.0.12.json. A difference still to close
// would be listed below with its reason; the test fails on any other difference, and on a listed
// one that is gone (so the list only shrinks). Fields Parley adds must use numbers upstream's
// message does not use.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { expect } from "chai";
import { ScalarType, type DescEnum, type DescField, type DescFile, type DescMessage } from "@bufbuild/protobuf";
import { file_api_v1_agent } from "../shared/gen/api/v1/agent_pb.js";
import { file_api_v1_auth } from "../shared/gen/api/v1/auth_pb.js";
import { file_api_v1_common } from "../shared/gen/api/v1/common_pb.js";
import { file_api_v1_contact } from "../shared/gen/api/v1/contact_pb.js";
import { file_api_v1_conversation } from "../shared/gen/api/v1/conversation_pb.js";
import { file_api_v1_gateway } from "../shared/gen/api/v1/gateway_pb.js";
import { file_api_v1_group } from "../shared/gen/api/v1/group_pb.js";
import { file_api_v1_media } from "../shared/gen/api/v1/media_pb.js";
import { file_api_v1_message } from "../shared/gen/api/v1/message_pb.js";
import { file_api_v1_push } from "../shared/gen/api/v1/push_pb.js";
import { file_api_v1_sync } from "../shared/gen/api/v1/sync_pb.js";
import { file_api_v1_updates } from "../shared/gen/api/v1/updates_pb.js";
import { file_api_v1_user } from "../shared/gen/api/v1/user_pb.js";
import { file_shared_v1_error } from "../shared/gen/shared/v1/error_pb.js";
import { file_shared_v1_agent } from "../shared/gen/shared/v1/agent_pb.js";
import { file_shared_v1_common } from "../shared/gen/shared/v1/common_pb.js";
import { file_shared_v1_contact } from "../shared/gen/shared/v1/contact_pb.js";
import { file_shared_v1_conversation } from "../shared/gen/shared/v1/conversation_pb.js";
import { file_shared_v1_group } from "../shared/gen/shared/v1/group_pb.js";
import { file_shared_v1_media } from "../shared/gen/shared/v1/media_pb.js";
import { file_shared_v1_message } from "../shared/gen/shared/v1/message_pb.js";
import { file_shared_v1_updates } from "../shared/gen/shared/v1/updates_pb.js";

interface FactField {
  name: string;
  number: number;
  type: string;
  label: string;
  oneof: string;
}

interface Facts {
  services: Record<string, string[]>;
  messages: Record<string, FactField[]>;
  enums: Record<string, Record<string, number>>;
}

const facts = JSON.parse(readFileSync(resolve(import.meta.dirname, "fixtures/nexus-proto-v0.0.12.json"), "utf8")) as Facts;

/** Differences still open, each with its reason (none now: the list only shrinks). */
const pending: Record<string, string> = {};

const files: DescFile[] = [
  file_api_v1_agent,
  file_api_v1_auth,
  file_api_v1_common,
  file_api_v1_contact,
  file_api_v1_conversation,
  file_api_v1_gateway,
  file_api_v1_group,
  file_api_v1_media,
  file_api_v1_message,
  file_api_v1_push,
  file_api_v1_sync,
  file_api_v1_updates,
  file_api_v1_user,
  file_shared_v1_error,
  file_shared_v1_agent,
  file_shared_v1_common,
  file_shared_v1_contact,
  file_shared_v1_conversation,
  file_shared_v1_group,
  file_shared_v1_media,
  file_shared_v1_message,
  file_shared_v1_updates,
];

// Types are matched by their full name: shared types live in shared.v1, services and their
// messages in api.v1, as upstream has them.
const messages = new Map<string, DescMessage>();
const enums = new Map<string, DescEnum>();
function collect(message: DescMessage): void {
  messages.set(message.typeName, message);
  message.nestedMessages.forEach(collect);
  for (const nested of message.nestedEnums) enums.set(nested.typeName, nested);
}
for (const file of files) {
  file.messages.forEach(collect);
  for (const declared of file.enums) enums.set(declared.typeName, declared);
}

/** A field's type and label in the facts table's notation, with short type names. */
function shapeOf(field: DescField): { type: string; label: string } {
  const named = (kind: string, typeName: string) => `${kind}:${typeName}`;
  const scalar = (type: ScalarType) => ScalarType[type].toLowerCase();
  switch (field.fieldKind) {
    case "scalar":
      return { type: scalar(field.scalar), label: field.proto.proto3Optional ? "optional" : "" };
    case "enum":
      return { type: named("enum", field.enum.typeName), label: field.proto.proto3Optional ? "optional" : "" };
    case "message":
      return { type: named("message", field.message.typeName), label: "" };
    case "list": {
      const type = field.listKind === "scalar" ? scalar(field.scalar) : field.listKind === "enum" ? named("enum", field.enum.typeName) : named("message", field.message.typeName);
      return { type, label: "repeated" };
    }
    case "map": {
      const value = field.mapKind === "scalar" ? scalar(field.scalar) : field.mapKind === "enum" ? named("enum", field.enum.typeName) : named("message", field.message.typeName);
      return { type: value, label: `map<${scalar(field.mapKey)},${value}>` };
    }
  }
}

function differences(): Map<string, string> {
  const found = new Map<string, string>();
  for (const [typeName, upstreamFields] of Object.entries(facts.messages)) {
    const ours = messages.get(typeName);
    if (!ours) {
      found.set(typeName, "missing message");
      continue;
    }
    for (const upstream of upstreamFields) {
      const key = `${typeName}.${upstream.name}`;
      const field = ours.fields.find((candidate) => candidate.name === upstream.name);
      if (!field) {
        found.set(key, "missing field");
        continue;
      }
      const shape = shapeOf(field);
      const problems = [];
      if (field.number !== upstream.number) problems.push(`number ${field.number}, upstream ${upstream.number}`);
      if (shape.type !== upstream.type) problems.push(`type ${shape.type}, upstream ${upstream.type}`);
      // A message field always has presence: `optional` on one changes nothing on the wire.
      const upstreamLabel = upstream.label === "optional" && upstream.type.startsWith("message:") ? "" : upstream.label;
      if (shape.label !== upstreamLabel) problems.push(`label "${shape.label}", upstream "${upstream.label}"`);
      if ((field.oneof?.name ?? "") !== upstream.oneof) problems.push(`oneof "${field.oneof?.name ?? ""}", upstream "${upstream.oneof}"`);
      if (problems.length > 0) found.set(key, problems.join("; "));
    }
    // Parley's own fields take numbers upstream's message leaves free.
    const upstreamNumbers = new Set(upstreamFields.map((field) => field.number));
    for (const field of ours.fields) {
      if (!upstreamFields.some((upstream) => upstream.name === field.name) && upstreamNumbers.has(field.number)) {
        found.set(`${typeName}.${field.name}`, `Parley's field uses number ${field.number}, which upstream uses`);
      }
    }
  }
  for (const [typeName, values] of Object.entries(facts.enums)) {
    const ours = enums.get(typeName);
    if (!ours) {
      found.set(typeName, "missing enum");
      continue;
    }
    for (const [name, number] of Object.entries(values)) {
      const value = ours.values.find((candidate) => candidate.name === name);
      if (value?.number !== number) found.set(`${typeName}.${name}`, value ? `number ${value.number}, upstream ${number}` : "missing value");
    }
  }
  return found;
}

describe("binary compatibility with the upstream protocol (nexus-proto v0.0.12)", () => {
  it("has upstream's number, type and oneof for every message field and enum value, but for the listed differences", () => {
    const unlisted = [...differences()].filter(([key]) => !(key in pending)).map(([key, problem]) => `${key}: ${problem}`);
    expect(unlisted).to.deep.equal([]);
  });

  it("lists only differences that still exist", () => {
    const found = differences();
    expect(Object.keys(pending).filter((key) => !found.has(key))).to.deep.equal([]);
  });

  it("serves every upstream service method under the same path", () => {
    const ours = new Set(files.flatMap((file) => file.services.flatMap((service) => service.methods.map((method) => `${service.typeName}/${method.name}`))));
    for (const [service, methods] of Object.entries(facts.services)) {
      for (const name of methods) expect(ours.has(`${service}/${name}`), `${service}/${name}`).to.equal(true);
    }
  });
});
