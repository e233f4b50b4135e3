// The stateless API tier: a Moleculer service that serves the Connect protocol (JSON and binary
// protobuf, unary) on the shared HTTP server and forwards each RPC to the engine action owning it.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { BlockList } from "node:net";
import type { DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextValues,
  type ConnectRouter,
  type MethodImpl,
  type ServiceImpl,
} from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { ServiceBroker, ServiceSchema } from "moleculer";
import { AgentService } from "../shared/gen/api/v1/agent_pb.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { SyncService } from "../shared/gen/api/v1/sync_pb.js";
import { UserService } from "../shared/gen/api/v1/user_pb.js";
import { ContactService } from "../shared/gen/api/v1/contact_pb.js";
import { ConversationService } from "../shared/gen/api/v1/conversation_pb.js";
import { GroupService } from "../shared/gen/api/v1/group_pb.js";
import { MediaService } from "../shared/gen/api/v1/media_pb.js";
import { MessageService } from "../shared/gen/api/v1/message_pb.js";
import { Errors } from "../shared/errors.js";
import { addressList, resolveClientAddress } from "../shared/ip.js";
import { rpcDuration, rpcRequests } from "../shared/metrics.js";
import { errorBodyJson, normalizeErrorBody, toConnectError } from "./errors.js";
import { requestFactsKey } from "./rpc.js";
import { strictJsonDecoder } from "../shared/strict-json.js";
import { agentService } from "./services/agent.js";
import { authService } from "./services/auth.js";
import { contactService } from "./services/contact.js";
import { groupService } from "./services/group.js";
import { conversationService } from "./services/conversation.js";
import { mediaService } from "./services/media.js";
import { messageService } from "./services/message.js";
import { pushService } from "./services/push.js";
import { syncService } from "./services/sync.js";
import { userService } from "./services/user.js";

/**
 * Largest request body accepted. UploadFile carries up to 5 MB of data: as base64 in JSON that is
 * 6,990,508 bytes plus names, well inside; data a little over 5 MB still arrives whole and gets
 * the media service's FILE_TOO_LARGE, while data past about 6 MB is refused here unread.
 */
export const maxRequestBytes = 8 * 1024 * 1024;

function registerRoutes(router: ConnectRouter, broker: ServiceBroker): void {
  serve(router, AuthService, authService(broker));
  serve(router, UserService, userService(broker));
  serve(router, PushService, pushService(broker));
  serve(router, SyncService, syncService(broker));
  serve(router, ContactService, contactService(broker));
  serve(router, AgentService, agentService(broker));
  serve(router, ConversationService, conversationService(broker));
  serve(router, MessageService, messageService(broker));
  serve(router, GroupService, groupService(broker));
  serve(router, MediaService, mediaService(broker));
}

/**
 * Registers each method on its own, so that its JSON requests are decoded for its own input type
 * (strict-json.ts); a method without an implementation answers unimplemented, as a whole service
 * registered at once would.
 */
function serve<S extends DescService>(router: ConnectRouter, service: S, impl: Partial<ServiceImpl<S>>): void {
  for (const method of service.methods) {
    const implemented = (impl as Record<string, MethodImpl<typeof method> | undefined>)[method.localName];
    const unimplemented = () => {
      throw new ConnectError(`${service.typeName}.${method.name} is not implemented`, Code.Unimplemented);
    };
    // Strict decoding: an unknown field or enum name is a client bug to report, not to drop.
    // Connect passes jsonOptions whole to its JSON serialization, which also takes the body's
    // textDecoder from there (createJsonSerialization); the handler options' type omits that one.
    const jsonOptions = { ignoreUnknownFields: false, textDecoder: strictJsonDecoder(method.input) };
    router.rpc(method, implemented ?? (unimplemented as MethodImpl<typeof method>), { jsonOptions });
  }
}

export interface ApiOptions {
  /** Proxies whose X-Forwarded-For is believed (TRUSTED_PROXIES); empty trusts none. */
  trustedProxies?: readonly string[];
}

function clientAddress(req: IncomingMessage, trustedProxies: BlockList | undefined): string {
  const forwarded = req.headers["x-forwarded-for"];
  return resolveClientAddress(req.socket.remoteAddress ?? "", Array.isArray(forwarded) ? forwarded.join(",") : forwarded, trustedProxies);
}

export interface ApiHandle {
  /** Serves one HTTP request if it is a Connect RPC; answers false when the path is not ours. */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /** The Connect-ES handler of a procedure path (the uWS front's way in), undefined when none. */
  universal(path: string): UniversalHandler | undefined;
}

export function apiService(onReady: (api: ApiHandle) => void, options: ApiOptions = {}): ServiceSchema {
  const trustedProxies = options.trustedProxies?.length ? addressList(options.trustedProxies) : undefined;
  return {
    name: "api",
    started() {
      const broker = this.broker;
      const router = createConnectRouter({
        readMaxBytes: maxRequestBytes,
        interceptors: [
          (next) => async (request) => {
            try {
              return await next(request);
            } catch (err) {
              throw toConnectError(err, (message, cause) => this.logger.error(message, cause));
            }
          },
        ],
      });
      registerRoutes(router, broker);
      const handlers = new Map<string, UniversalHandler>(router.handlers.map((h) => [h.requestPath, h]));

      const handle = (req: IncomingMessage, res: ServerResponse): boolean => {
        const path = (req.url ?? "").split("?", 1)[0];
        if (!path.startsWith("/api.v1.")) return false;
        const handler = handlers.get(path);
        const started = process.hrtime.bigint();
        const procedure = handler ? path : "unknown";
        const finish = (code: string) => {
          rpcRequests.inc({ procedure, code });
          rpcDuration.observe({ procedure }, Number(process.hrtime.bigint() - started) / 1e9);
        };
        if (!handler) {
          const body = JSON.stringify({ code: "unimplemented", message: `no such procedure: ${path}` });
          res.writeHead(404, { "content-type": "application/json" });
          res.end(normalizeErrorBody(404, new TextEncoder().encode(body)).body);
          finish("unimplemented");
          return true;
        }
        const fail = (err: unknown) => {
          // A client that went away mid-answer is no fault of ours: nobody to answer, nothing to report.
          if (res.destroyed) return;
          this.logger.error("failed to answer an RPC", err);
          finish("internal");
          if (res.headersSent) res.destroy();
          else res.writeHead(500, { "content-type": "application/json" }).end(errorBodyJson(Errors.internal));
        };
        const contextValues = createContextValues().set(requestFactsKey, { clientIp: clientAddress(req, trustedProxies), host: req.headers.host ?? "" });
        // Connect builds a URL from the Host header, of which it reads only the path: a request
        // without a Host (HTTP/1.0) gets a stand-in. Hosts that make no URL never get this far.
        req.headers.host ||= "localhost";
        let universalRequest: UniversalServerRequest;
        try {
          universalRequest = universalRequestFromNodeRequest(req, res, undefined, contextValues);
        } catch (err) {
          fail(err);
          return true;
        }
        handler(universalRequest)
          .then(async (response) => {
            if (response.status === 200) {
              finish("ok");
              return universalResponseToNodeResponse(response, res);
            }
            const chunks: Uint8Array[] = [];
            if (response.body) for await (const chunk of response.body) chunks.push(chunk);
            const normalized = normalizeErrorBody(response.status, Buffer.concat(chunks));
            finish(normalized.code);
            const header = new Headers(response.header);
            header.set("content-length", String(normalized.body.byteLength));
            return universalResponseToNodeResponse({ ...response, status: normalized.status, header, body: oneChunk(normalized.body) }, res);
          })
          .catch(fail);
        return true;
      };
      onReady({ handle, universal: (path) => handlers.get(path) });
    },
  };
}

async function* oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  yield body;
}
