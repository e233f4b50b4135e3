// JSON request bodies as we accept them: valid UTF-8, and int64 values only in their proto3 JSON
// forms. protobuf-es reads an int64 string with BigInt(), which also takes "0x10", " 12", "+5",
// "0b11" and "" (zero); and a JSON number past 2^53 has already lost digits when it arrives.
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";

const int64Scalars = new Set([ScalarType.INT64, ScalarType.SINT64, ScalarType.SFIXED64, ScalarType.UINT64, ScalarType.FIXED64]);
const int64Wrappers = new Set(["google.protobuf.Int64Value", "google.protobuf.UInt64Value"]);
/** As deep as protobuf-es reads messages (its recursionLimit); deeper input fails there anyway. */
const maxDepth = 100;

/**
 * The one rule for an int64 in JSON: a decimal string ("-12", "12"), or a number that is an exact
 * integer (larger magnitudes go as strings). Other JSON types are left to protobuf-es to refuse.
 */
export function isStrictInt64Json(value: unknown): boolean {
  if (typeof value === "string") return /^-?[0-9]+$/.test(value);
  if (typeof value === "number") return Number.isSafeInteger(value);
  return true;
}

const int64Presence = new Map<string, boolean>();

/** Whether a field can hold an int64: itself, its items or map keys and values, or through nesting. */
function fieldHoldsInt64(field: DescField, visiting: Set<string>): boolean {
  switch (field.fieldKind) {
    case "scalar":
      return int64Scalars.has(field.scalar);
    case "list":
      return field.listKind === "scalar" ? int64Scalars.has(field.scalar) : field.listKind === "message" && containsInt64(field.message, visiting);
    case "map":
      return int64Scalars.has(field.mapKey) || (field.mapKind === "scalar" ? int64Scalars.has(field.scalar) : field.mapKind === "message" && containsInt64(field.message, visiting));
    case "message":
      return containsInt64(field.message, visiting);
    default:
      return false;
  }
}

/** Whether a message of this type can hold an int64 anywhere, through any nesting. */
export function containsInt64(desc: DescMessage, visiting = new Set<string>()): boolean {
  const known = int64Presence.get(desc.typeName);
  if (known !== undefined) return known;
  if (int64Wrappers.has(desc.typeName)) return true;
  // A message that contains itself adds nothing new on the way round.
  if (visiting.has(desc.typeName)) return false;
  visiting.add(desc.typeName);
  const found = desc.fields.some((field) => fieldHoldsInt64(field, visiting));
  visiting.delete(desc.typeName);
  if (visiting.size === 0) int64Presence.set(desc.typeName, found);
  return found;
}

/** The fields of a message worth a look, each with the keys protobuf-es takes it under (JSON name, proto name). */
const fieldsToCheck = new Map<string, { field: DescField; keys: readonly string[] }[]>();

function fieldsOf(desc: DescMessage) {
  let fields = fieldsToCheck.get(desc.typeName);
  if (!fields) {
    fields = desc.fields
      .filter((field) => fieldHoldsInt64(field, new Set()))
      .map((field) => ({ field, keys: field.jsonName === field.name ? [field.name] : [field.jsonName, field.name] }));
    fieldsToCheck.set(desc.typeName, fields);
  }
  return fields;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Where a lenient value sits: path segments, innermost last, built only once one is found. */
interface Problem {
  path: string[];
  what: string;
}

const problemOf = (value: unknown, what = JSON.stringify(value)): Problem | undefined => (isStrictInt64Json(value) ? undefined : { path: [], what });

function within(segment: string, problem: Problem | undefined): Problem | undefined {
  problem?.path.unshift(segment);
  return problem;
}

/**
 * The first int64 in `json` (read as a `desc` message) that breaks the rule above, described as
 * "<type>.<field path>: <value>"; undefined when there is none. Values of the wrong shape are
 * skipped: protobuf-es refuses them with its own message.
 */
export function lenientInt64(desc: DescMessage, json: unknown): string | undefined {
  const problem = messageProblem(desc, json, 0);
  return problem && `${desc.typeName}${problem.path.join("")}: ${problem.what}`;
}

/** Why `json` (read as a `desc` message) cannot be taken under the int64 rule, or undefined when it can. */
export function int64RuleBroken(desc: DescMessage, json: unknown): string | undefined {
  const problem = lenientInt64(desc, json);
  return problem && `cannot decode ${problem}: an int64 is a decimal string, or a whole number below 2^53 in magnitude`;
}

function messageProblem(desc: DescMessage, json: unknown, depth: number): Problem | undefined {
  if (int64Wrappers.has(desc.typeName)) return problemOf(json);
  if (!isObject(json) || depth > maxDepth) return undefined;
  for (const { field, keys } of fieldsOf(desc)) {
    for (const key of keys) {
      if (key in json) {
        const problem = within(`.${key}`, fieldProblem(field, json[key], depth));
        if (problem) return problem;
      }
    }
  }
  return undefined;
}

function fieldProblem(field: DescField, value: unknown, depth: number): Problem | undefined {
  switch (field.fieldKind) {
    case "scalar":
      return problemOf(value);
    case "message":
      return messageProblem(field.message, value, depth + 1);
    case "list":
      if (!Array.isArray(value)) return undefined;
      for (let index = 0; index < value.length; index += 1) {
        const problem = field.listKind === "scalar" ? problemOf(value[index]) : field.listKind === "message" ? messageProblem(field.message, value[index], depth + 1) : undefined;
        if (problem) return within(`[${index}]`, problem);
      }
      return undefined;
    case "map":
      if (!isObject(value)) return undefined;
      for (const [key, item] of Object.entries(value)) {
        if (int64Scalars.has(field.mapKey) && !isStrictInt64Json(key)) return { path: [], what: `key ${JSON.stringify(key)}` };
        const problem =
          field.mapKind === "scalar" ? (int64Scalars.has(field.scalar) ? problemOf(item) : undefined) : field.mapKind === "message" ? messageProblem(field.message, item, depth + 1) : undefined;
        if (problem) return within(`[${JSON.stringify(key)}]`, problem);
      }
      return undefined;
    default:
      return undefined;
  }
}

/**
 * What Connect decodes a JSON request body with, for requests of type `desc`: Connect hands the
 * body's bytes to this decoder and the text it returns to protobuf-es, so both rules apply to
 * every JSON request (Connect, gRPC-web and gRPC alike) before anything reads it, with no copy of
 * the body. Invalid UTF-8 throws instead of turning into U+FFFD; a lenient int64 throws too. The
 * second JSON.parse it takes for that is paid only by types that hold an int64.
 */
export function strictJsonDecoder(desc: DescMessage): { decode(bytes?: Uint8Array): string } {
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  const checkInt64 = containsInt64(desc);
  return {
    decode(bytes) {
      const text = utf8.decode(bytes);
      if (!checkInt64) return text;
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        return text; // protobuf-es reports the syntax error as it always has
      }
      const broken = int64RuleBroken(desc, json);
      if (broken) throw new Error(broken);
      return text;
    },
  };
}
