// How one RPC is served: authenticate by access label, validate the request against the bounds
// in the .proto (protovalidate), forward to the engine action that owns it, and return its answer.
import { createRegistry, type DescMessage, type DescMethodUnary, type DescService, type MessageShape } from "@bufbuild/protobuf";
import { createValidator, violationToProto } from "@bufbuild/protovalidate";
import { createContextKey, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { ServiceBroker } from "moleculer";
import type { Caller, RpcParams } from "../shared/caller.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { file_api_v1_rules } from "../shared/gen/api/v1/rules_pb.js";
import { fromWire, toWire, type WireMessage } from "../shared/wire.js";
import { identityCacheOf } from "./identity-cache.js";

/** The spec's access labels: user-only, agent-only, no-auth, and any (either identity). */
export type Access = "user" | "agent" | "none" | "any";

export interface RequestFacts {
  clientIp: string;
  host: string;
}

export const requestFactsKey = createContextKey<RequestFacts>({ clientIp: "", host: "" });

export interface RpcRoute {
  access: Access;
  /** The engine action that serves this RPC. */
  action: string;
}

// Our predefined rules (rules.proto) are extensions: a validator that does not know them fails to
// compile every rule of a field that uses one.
const validator = createValidator({ registry: createRegistry(file_api_v1_rules) });

export function validateRequest<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): void {
  const result = validator.validate(schema, message);
  if (result.kind === "valid") return;
  if (result.kind === "error") throw new ParleyError(Errors.internal, {}, "request validation could not run");
  const [first] = result.violations;
  const proto = violationToProto(first)[0];
  const field = proto.field?.elements.map((element) => element.fieldName).join(".") ?? "";
  throw new ParleyError(
    Errors.invalidArgument,
    { field, rule: first.ruleId, violations: String(result.violations.length) },
    field ? `${field}: ${first.message}` : first.message,
  );
}

export async function authenticate(broker: ServiceBroker, context: HandlerContext, access: Access): Promise<Caller | undefined> {
  if (access === "none") return undefined;
  const header = context.requestHeader.get("authorization") ?? "";
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) throw new ParleyError(Errors.unauthenticated, {}, "an Authorization: Bearer token is required");
  // The client address is what an agent's IP whitelist is checked against.
  const { clientIp } = context.values.get(requestFactsKey);
  const caller = await identityCacheOf(broker).resolve(match[1], clientIp);
  if (access === "user" && caller.kind !== "user") throw new ParleyError(Errors.userOnly);
  if (access === "agent" && caller.kind !== "agent") throw new ParleyError(Errors.agentOnly);
  return caller;
}

type UnaryMethodNames<S extends DescService> = {
  [K in keyof S["method"]]: S["method"][K] extends DescMethodUnary ? K : never;
}[keyof S["method"]];

/** The route table of a service: every unary method named, with its access label and action. */
export type RouteTable<S extends DescService> = Record<UnaryMethodNames<S> & string, RpcRoute>;

/** Builds a Connect implementation that serves each method of `service` through its route. */
export function forwardingService<S extends DescService>(broker: ServiceBroker, service: S, routes: Partial<RouteTable<S>>): ServiceImpl<S> {
  const impl: Record<string, (request: MessageShape<DescMessage>, context: HandlerContext) => Promise<MessageShape<DescMessage>>> = {};
  for (const method of service.methods) {
    const route = (routes as Record<string, RpcRoute>)[method.localName];
    if (!route || method.methodKind !== "unary") continue;
    impl[method.localName] = async (request, context) => {
      const caller = await authenticate(broker, context, route.access);
      validateRequest(method.input, request);
      const facts = context.values.get(requestFactsKey);
      const params: RpcParams = { caller, request: toWire(method.input, request), clientIp: facts.clientIp, host: facts.host };
      const result = (await broker.call(route.action, params)) as WireMessage;
      return fromWire(method.output, result);
    };
  }
  return impl as unknown as ServiceImpl<S>;
}
