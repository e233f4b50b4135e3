// The directory of public, active agents (DATA-MODEL.md §6.3): what agent search and the featured
// sample read instead of scanning every account. 16 fixed partitions (agent id mod 16) with the
// lowercased searchable text, read in parallel: a fixed fan-out of known keys. A directory row is
// a hint: readers confirm each agent against its agent and account rows, so a row left behind by
// a race (a profile change and a visibility change crossing) shows nothing it should not.
import { AgentStatus, AgentVisibility } from "../store.js";
import type { Cql, Statement } from "./cql.js";

export const directoryBuckets = 16;

const bucketOf = (agentUserId: number) => agentUserId % directoryBuckets;

/** Whether an agent belongs in the directory (and in search and featured answers). */
export const isListed = (agent: { status: number; visibility: number }) => agent.status === AgentStatus.active && agent.visibility === AgentVisibility.public;

/** The text search matches: nickname and description case-insensitively, the (lowercase) username as is. */
export interface DirectoryText {
  nickname: string;
  username: string;
  signature: string;
}

export function matchesText(text: DirectoryText, needle: string): boolean {
  return text.nickname.toLowerCase().includes(needle) || text.username.includes(needle) || text.signature.toLowerCase().includes(needle);
}

/** The agent's directory row as it should now be: written when listed, deleted otherwise (both idempotent). */
export function directoryStatement(agentUserId: number, listed: boolean, text: DirectoryText): Statement {
  return listed
    ? {
        query: "INSERT INTO agent_directory (bucket, agent_user_id, nickname_lc, username, signature_lc) VALUES (?, ?, ?, ?, ?)",
        params: [bucketOf(agentUserId), agentUserId, text.nickname.toLowerCase(), text.username, text.signature.toLowerCase()],
      }
    : { query: "DELETE FROM agent_directory WHERE bucket = ? AND agent_user_id = ?", params: [bucketOf(agentUserId), agentUserId] };
}

/** Ids of directory rows whose text contains the (lowercase) needle, ascending. */
export async function searchDirectory(cql: Cql, needle: string): Promise<number[]> {
  const buckets = await Promise.all(
    Array.from({ length: directoryBuckets }, (_, bucket) =>
      cql.rows("SELECT agent_user_id, nickname_lc, username, signature_lc FROM agent_directory WHERE bucket = ?", [bucket]),
    ),
  );
  return buckets
    .flat()
    .filter((row) =>
      matchesText({ nickname: (row.nickname_lc as string | null) ?? "", username: (row.username as string | null) ?? "", signature: (row.signature_lc as string | null) ?? "" }, needle),
    )
    .map((row) => row.agent_user_id as number)
    .sort((a, b) => a - b);
}

/**
 * Up to `limit` ids of one bucket from a random position on, wrapping around: two small slices,
 * so a sample costs the same however many agents are listed.
 */
export async function randomSlice(cql: Cql, bucket: number, limit: number, random: () => number = Math.random): Promise<number[]> {
  const from = Math.floor(random() * 2 ** 31);
  const after = await cql.rows("SELECT agent_user_id FROM agent_directory WHERE bucket = ? AND agent_user_id >= ? LIMIT ?", [bucket, from, limit], { fetchSize: limit });
  const ids = after.map((row) => row.agent_user_id as number);
  if (ids.length < limit) {
    const before = await cql.rows("SELECT agent_user_id FROM agent_directory WHERE bucket = ? AND agent_user_id < ? LIMIT ?", [bucket, from, limit - ids.length], {
      fetchSize: limit - ids.length,
    });
    ids.push(...before.map((row) => row.agent_user_id as number));
  }
  return ids;
}
