// What the conversation actors deliver without storing it: ephemeral updates (stream deltas, card
// action answers) pushed live to whoever is connected, and card actions handed to the agent that
// sent the card, through its update stream's owner (the sync wing's inbox, by its typed action).
// With fan-out.ts (what is stored first) this is everything an actor hands on for delivery.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Context } from "moleculer";
import type { UpdateJson } from "../../shared/gen/api/v1/updates_pb.js";
import { UserInfoSchema, type UserInfo } from "../../shared/gen/shared/v1/common_pb.js";
import { CardActionPayloadSchema, NonSnUpdateSchema, type CardActionPayload } from "../../shared/gen/shared/v1/updates_pb.js";
import type { LiveEvent } from "../../shared/bus.js";
import { toWire } from "../../shared/wire.js";
import { callEngine, type CardActionParams } from "../engine-actions.js";
import { relatedParts } from "./fan-out-contracts.js";
import type { LiveDelivery } from "./live-router.js";

/**
 * Pushes an ephemeral entry (a stream delta, a card action answer) live to the users'
 * connections: nothing is stored and no sn is assigned, so no inbox is involved. It goes to the
 * gateways holding the users (live-router.ts), encoded once.
 */
export function sendEphemeral(
  live: LiveDelivery,
  userIds: readonly number[],
  entry: MessageInitShape<typeof NonSnUpdateSchema>["update"],
  users: UserInfo[] = [],
): void {
  const update: UpdateJson = {
    ...relatedParts({ users: users.map((user) => toWire(UserInfoSchema, user)) }),
    nonSnUpdate: toWire(NonSnUpdateSchema, { update: entry } as MessageInitShape<typeof NonSnUpdateSchema>),
  } as UpdateJson;
  void live.send({ update, userIds: [...userIds] } satisfies LiveEvent);
}

/** Delivers a card action to the agent that sent the card, through the agent's inbox actor (Inbox.deliverCardAction). */
export async function deliverCardAction(ctx: Pick<Context, "call">, agentUserId: number, cardAction: CardActionPayload, submitter: UserInfo | undefined): Promise<void> {
  const params: CardActionParams = {
    userId: agentUserId,
    cardAction: toWire(CardActionPayloadSchema, cardAction),
    users: submitter ? [toWire(UserInfoSchema, submitter)] : [],
  };
  await callEngine(ctx, "sync.deliverCardAction", params);
}
