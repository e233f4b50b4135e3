// Engine actions that serve one RPC share one shape: the wire form of the request in, the wire
// form of the response out (see shared/wire.ts). This adapter keeps that conversion in one place
// so each handler works with typed messages only.
import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { Context } from "moleculer";
import type { Caller, RpcParams } from "../shared/caller.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { fromWire, toWire, type WireMessage } from "../shared/wire.js";

export interface RpcCall<Req> {
  request: Req;
  caller: Caller | undefined;
  clientIp: string;
  host: string;
  ctx: Context<RpcParams>;
}

export function rpcAction<Req extends DescMessage, Res extends DescMessage>(
  requestSchema: Req,
  responseSchema: Res,
  handler: (call: RpcCall<MessageShape<Req>>) => Promise<MessageInitShape<Res> | MessageShape<Res>>,
) {
  return async (ctx: Context<RpcParams>): Promise<WireMessage> => {
    const request = fromWire(requestSchema, ctx.params.request);
    const response = await handler({ request, caller: ctx.params.caller, clientIp: ctx.params.clientIp ?? "", host: ctx.params.host ?? "", ctx });
    return toWire(responseSchema, response);
  };
}

/** The caller of an action that only users may reach; the API tier already checked the label. */
export function requireUser(caller: Caller | undefined): Caller {
  if (!caller || caller.kind !== "user") throw new ParleyError(Errors.userOnly);
  return caller;
}

/** The caller of an action open to users and agents. */
export function requireCaller(caller: Caller | undefined): Caller {
  if (!caller) throw new ParleyError(Errors.unauthenticated);
  return caller;
}
