// Relationships between test users, built through the real ContactService and AgentService.
import { AgentService } from "../../shared/gen/api/v1/agent_pb.js";
import { ContactService } from "../../shared/gen/api/v1/contact_pb.js";
import { privateConversationId } from "../../shared/ids.js";
import type { SignedIn } from "./accounts.js";
import { client, type TestServer, type WireMode } from "./harness.js";

/** Makes two users mutual contacts; answers their PRIVATE conversation id. */
export async function befriend(server: { url: string }, a: SignedIn, b: SignedIn, mode: WireMode = "json"): Promise<bigint> {
  const { requestId } = await client(server, ContactService, mode, a.accessToken).sendFriendRequest({ targetUserId: b.userId, message: "hi" });
  await client(server, ContactService, mode, b.accessToken).acceptFriendRequest({ requestId });
  return privateConversationId(a.userId, b.userId);
}

export interface TestAgent {
  userId: number;
  token: string;
  secretKey: string;
  /** The PRIVATE conversation between the agent and its creator. */
  conversationId: bigint;
}

let agentCounter = 0;
export async function createAgent(server: TestServer, owner: SignedIn, mode: WireMode = "json"): Promise<TestAgent> {
  agentCounter += 1;
  const username = `bot_${process.pid}_${agentCounter}`.slice(0, 32);
  const created = await client(server, AgentService, mode, owner.accessToken).createAgent({ username, name: `Bot ${agentCounter}`, signature: "helps" });
  const userId = created.profile!.user!.userId;
  return { userId, token: created.token, secretKey: created.secretKey, conversationId: privateConversationId(owner.userId, userId) };
}
