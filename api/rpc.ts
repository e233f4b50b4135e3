// How one RPC is served: authenticate by access label, validate the request against the bounds
// in the .proto (protovalidate), forward to the engine action that owns it, and return its answer.
import { createRegistry, type DescMessage, type DescMethodUnary, type DescService, type MessageShape } from "@bufbuild/protobuf";
import { createValidator, violationToProto } from "@bufbuild/protovalidate";
import { Code, ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { ServiceBroker } from "moleculer";
import type { Caller, RpcParams } from "../shared/caller.js";
import { Errors, ParleyError } from "../shared/errors.js";
import { file_api_v1_rules } from "../shared/gen/api/v1/rules_pb.js";
import { fromWire, toWire, type WireMessage } from "../shared/wire.js";
import { identityCacheOf } from "./identity-cache.js";
import { callAction, type RpcActionName } from "../shared/actions.js";

/** The spec's access labels: user-only, agent-only, no-auth, and any (either identity). */
export type Access = "user" | "agent" | "none" | "any";

/** What a procedure reads of the HTTP request besides its message. */
export interface RequestFacts {
  /** The Authorization header as received, undefined when there is none. */
  authorization: string | undefined;
  /** The client address, trusted proxies applied. */
  clientIp: string;
  /** The Host header as received, "" when there is none. */
  host: string;
}

/** How Connect-ES hands the facts it cannot read from its headers to a procedure. */
export const requestFactsKey = createContextKey<Omit<RequestFacts, "authorization">>({ clientIp: "", host: "" });

export interface RpcRoute {
  access: Access;
  /** The engine action that serves this RPC. */
  action: RpcActionName;
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

export async function authenticate(broker: ServiceBroker, facts: RequestFacts, access: Access): Promise<Caller | undefined> {
  if (access === "none") return undefined;
  const header = facts.authorization ?? "";
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) throw new ParleyError(Errors.unauthenticated, {}, "an Authorization: Bearer token is required");
  // The client address is what an agent's IP whitelist is checked against.
  const { clientIp } = facts;
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

/**
 * One RPC as the API tier serves it, whatever carried it (the lean unary path or Connect-ES):
 * authenticate by access label, validate, forward to the engine action that owns it.
 */
export interface Procedure {
  readonly method: DescMethodUnary;
  /** Serves one request; resolves with the wire form of the answer (shared/wire.ts), rejects with what the engine threw. */
  forward(request: MessageShape<DescMessage>, facts: RequestFacts): Promise<WireMessage>;
}

class ForwardingProcedure implements Procedure {
  constructor(
    private readonly broker: ServiceBroker,
    readonly method: DescMethodUnary,
    private readonly route: RpcRoute,
  ) {}

  async forward(request: MessageShape<DescMessage>, facts: RequestFacts): Promise<WireMessage> {
    const caller = await authenticate(this.broker, facts, this.route.access);
    validateRequest(this.method.input, request);
    const params: RpcParams = { caller, request: toWire(this.method.input, request), clientIp: facts.clientIp, host: facts.host };
    return callAction(this.broker, this.route.action, params);
  }
}

/** A method of our services that no route serves answers unimplemented, as Connect-ES does. */
class UnimplementedProcedure implements Procedure {
  constructor(readonly method: DescMethodUnary) {}

  forward(): Promise<WireMessage> {
    return Promise.reject(new ConnectError(`${this.method.parent.typeName}.${this.method.name} is not implemented`, Code.Unimplemented));
  }
}

/** The procedures of one service: each unary method of `service`, served through its route. */
export function forwardingProcedures<S extends DescService>(broker: ServiceBroker, service: S, routes: Partial<RouteTable<S>>): Procedure[] {
  return service.methods.map((method) => {
    if (method.methodKind !== "unary") throw new Error(`${service.typeName}.${method.name} streams; the API serves unary methods only`);
    const unary = method as DescMethodUnary;
    const route = (routes as Record<string, RpcRoute | undefined>)[method.localName];
    return route ? new ForwardingProcedure(broker, unary, route) : new UnimplementedProcedure(unary);
  });
}

/** What Connect-ES calls for a procedure: the same procedure, its facts read from Connect's context. */
export function connectImplementation(procedure: Procedure): (request: MessageShape<DescMessage>, context: HandlerContext) => Promise<MessageShape<DescMessage>> {
  const output = procedure.method.output;
  return async (request, context) => {
    const { clientIp, host } = context.values.get(requestFactsKey);
    const facts: RequestFacts = { authorization: context.requestHeader.get("authorization") ?? undefined, clientIp, host };
    return fromWire(output, await procedure.forward(request, facts));
  };
}
