// Mini Apps: the permission bits an agent may request, and the signed launch data (initData) the
// server hands to a Mini App so that the agent's backend can trust who opened it and from where.
//
// initData is a URL query string (application/x-www-form-urlencoded) with these fields:
//   agent_user_id    the agent's user id
//   auth_date        when the server issued it, Unix seconds
//   conversation_id  the conversation it was opened from, "0" for none
//   platform         as the client said (ios, android, desktop)
//   query_id         128 random bits, base64url: unique per launch
//   start_param      the deep-link or card-action parameter, possibly empty
//   user             the proto3 JSON of the launching user's UserInfo; only {"userId":…} unless
//                    the agent holds the READ_PROFILE permission
//   hash             lowercase hex HMAC-SHA256 over the data-check string (every other field as
//                    key=value, decoded values, sorted by key, joined with "\n"), keyed with
//                    HMAC-SHA256(key "NexusMiniApp", message the agent's secret key)
// This is the rule the upstream agent SDK (nexus-x) verifies, so its agents check our initData
// unchanged; it accepts an auth_date up to 5 minutes from its clock either way.
// No value may contain a line break (the server refuses such a startParam; JSON escapes its own),
// and a verifier should accept exactly these fields, each once: otherwise "a=x\nb=y" inside one
// value would read as two fields and a signed string could be re-cut into forged ones.
// verifyInitData below needs only node:crypto, dataCheckString, initDataKey and initDataKeys: an
// agent copies the four.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/** The Mini App permission bitmask. Undefined bits are refused by SetAgentMiniApp. */
export const MiniAppPermission = {
  /** initData carries the user's public profile (username, nickname, avatar, bio), not only the id. */
  readProfile: 1,
  /** The client lets the Mini App send messages as the user into the launch conversation, after asking. */
  sendMessages: 2,
  /** The client lets the Mini App ask the user to share their phone number or email. */
  requestContact: 4,
} as const;

export const allMiniAppPermissions = Object.values(MiniAppPermission).reduce((all: number, bit) => all | bit, 0);

export interface InitDataFields {
  agentUserId: number;
  authDate: number;
  conversationId: bigint;
  platform: string;
  startParam: string;
  /** The proto3 JSON of the user's UserInfo (or of its id alone). */
  userJson: string;
}

function dataCheckString(fields: Iterable<[string, string]>): string {
  return [...fields]
    .filter(([key]) => key !== "hash")
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) => `${key}=${value}`)
    .join("\n");
}

/** The key the hash is made with: derived from the secret key, never the secret key itself. */
function initDataKey(secretKey: string): Buffer {
  return createHmac("sha256", "NexusMiniApp").update(secretKey).digest();
}

const initDataKeys = ["agent_user_id", "auth_date", "conversation_id", "hash", "platform", "query_id", "start_param", "user"];

/** How far auth_date may be from the verifier's clock, either way: the upstream SDK's window. */
export const initDataMaxSkewSeconds = 5 * 60;

/** Builds and signs the initData query string. */
export function signInitData(secretKey: string, fields: InitDataFields): string {
  if ([fields.platform, fields.startParam, fields.userJson].some((value) => /[\r\n]/.test(value))) {
    throw new Error("initData values cannot contain line breaks");
  }
  const params = new URLSearchParams({
    agent_user_id: String(fields.agentUserId),
    auth_date: String(fields.authDate),
    conversation_id: String(fields.conversationId),
    platform: fields.platform,
    query_id: randomBytes(16).toString("base64url"),
    start_param: fields.startParam,
    user: fields.userJson,
  });
  params.append("hash", createHmac("sha256", initDataKey(secretKey)).update(dataCheckString(params)).digest("hex"));
  return params.toString();
}

/**
 * What an agent runs on the initData its Mini App received: answers the fields when the hash is
 * the agent's and auth_date is at most `maxSkewSeconds` from now either way, undefined otherwise.
 */
export function verifyInitData(initData: string, secretKey: string, maxSkewSeconds = initDataMaxSkewSeconds, nowSeconds = Math.floor(Date.now() / 1000)): Record<string, string> | undefined {
  const params = new URLSearchParams(initData);
  const hash = params.get("hash") ?? "";
  if (!/^[0-9a-f]{64}$/.test(hash)) return undefined;
  const entries = [...params.entries()];
  // Exactly the known fields, once each, without line breaks: otherwise one value could be made
  // to read as several fields of the data-check string, and a hash reused for forged ones.
  if (entries.length !== initDataKeys.length || initDataKeys.some((key) => params.getAll(key).length !== 1)) return undefined;
  if (entries.some(([, value]) => /[\r\n]/.test(value))) return undefined;
  const expected = createHmac("sha256", initDataKey(secretKey)).update(dataCheckString(entries)).digest();
  if (!timingSafeEqual(expected, Buffer.from(hash, "hex"))) return undefined;
  const authDate = Number(params.get("auth_date"));
  if (!Number.isInteger(authDate) || Math.abs(nowSeconds - authDate) > maxSkewSeconds) return undefined;
  return Object.fromEntries(entries);
}
