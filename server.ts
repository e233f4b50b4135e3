// The composition root: picks the adapters behind every port once, builds the services of the
// requested roles into one Moleculer broker, and serves HTTP (Connect, /ws, health, metrics) on
// one port. `npm start` runs all roles in one process; tests and multi-node setups pick roles.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import moleculer, { type ServiceBroker } from "moleculer";
import { apiService, type ApiHandle, type ApiOptions } from "./api/api-service.js";
import { errorBodyJson } from "./api/errors.js";
import { identityCacheOf, identityCacheService } from "./api/identity-cache.js";
import { mediaDownloadHandler } from "./api/media-http.js";
import { accountsService } from "./engine/accounts.js";
import { agentsService } from "./engine/agents.js";
import { conversationService } from "./engine/conversation.js";
import { conversationsService } from "./engine/conversations.js";
import { groupsService } from "./engine/groups.js";
import { LocalDiskBlobStore } from "./engine/blob-store/local-disk-blob-store.js";
import { mediaService } from "./engine/media.js";
import { socialService } from "./engine/social.js";
import { systemAgentService } from "./engine/system-agent.js";
import { systemClock, type Clock } from "./engine/clock.js";
import { createCodeSender } from "./engine/code-delivery/code-sender.js";
import type { EngineDeps } from "./engine/deps.js";
import { MemoryEphemeralState } from "./engine/ephemeral/memory-ephemeral-state.js";
import { webhookTarget } from "./engine/agent-delivery.js";
import { FanOuts } from "./engine/fan-out.js";
import { Ownership } from "./engine/ownership.js";
import { inboxService } from "./engine/inbox.js";
import { LogPushNotifier } from "./engine/push-notifier/log-push-notifier.js";
import { presenceService } from "./engine/presence.js";
import { pushService } from "./engine/push.js";
import { openSqliteStore } from "./engine/store/sqlite/sqlite-store.js";
import type { Store } from "./engine/store/store.js";
import { usersService } from "./engine/users.js";
import type { ConnectionPolicy } from "./gateway/connection.js";
import { gatewayService } from "./gateway/gateway-service.js";
import { webhookService } from "./gateway/webhooks/webhook-service.js";
import { webhookDispatcherService, type DispatcherPolicy } from "./gateway/webhooks/dispatcher.js";
import { HttpDrain } from "./http-drain.js";
import { brokerOptions, type BrokerSettings } from "./moleculer.config.js";
import type { ParleyConfig } from "./shared/config.js";
import { Errors, type CatalogueEntry } from "./shared/errors.js";
import { mediaPathPrefix } from "./shared/media-download.js";
import { metricsRegistry, openSockets } from "./shared/metrics.js";
import { isServableHost } from "./shared/public-url.js";

/** "edge" serves clients (Connect API and WebSocket gateway); "engine" owns state. */
export type Role = "edge" | "engine";

export interface ParleyOptions {
  config: ParleyConfig;
  roles?: Role[];
  clock?: Clock;
  broker?: BrokerSettings;
  /**
   * How long stop() keeps accepting connections while /healthz answers 503, so load balancers
   * stop routing here before connections are refused; none by default.
   */
  healthGraceMs?: number;
  /** Gateway connection limits (timeouts, send queue size); defaults suit production. */
  gateway?: Partial<ConnectionPolicy>;
  /** Webhook dispatch timing (retry base, answer limit, polling); defaults follow the spec. */
  webhooks?: Partial<DispatcherPolicy>;
  /** Adapters to use instead of the configured ones (tests record what leaves the engine, or make the store fail). */
  adapters?: Partial<Pick<EngineDeps, "pushNotifier">> & { store?: (opened: Store) => Store };
  /** How long clients may take to send requests; defaults suit production. */
  http?: Partial<HttpTimeouts>;
  /** API tier switches; `leanUnary: false` serves every RPC through Connect-ES (test/lean-rpc-wire.test.ts compares both). */
  api?: Pick<ApiOptions, "leanUnary">;
}

export interface HttpTimeouts {
  /** Longest a client may take to send a request's headers. */
  headersTimeoutMs: number;
  /**
   * Longest a client may take to send a whole request, body included. It covers receiving only:
   * a long download or a WebSocket (its upgrade request is short) runs as long as it needs.
   */
  requestTimeoutMs: number;
}

/** A slow sender holds a socket for at most about this long; 30 s moves an 8 MiB body at about 2.2 Mbit/s. */
export const defaultHttpTimeouts: HttpTimeouts = { headersTimeoutMs: 20_000, requestTimeoutMs: 30_000 };

export interface Parley {
  broker: ServiceBroker;
  /** The bound port of the edge role (0 when this process has no edge). */
  port: number;
  /** Base URL of the edge, e.g. http://127.0.0.1:8080. */
  url: string;
  /**
   * Stops gracefully: /healthz answers 503, new connections are refused, requests in flight get
   * up to `config.drainTimeoutMs` to finish, then the services stop (WebSockets close with 1001)
   * and the store closes. Called again while the first stop drains, it cuts the drain short.
   */
  stop(): Promise<void>;
}

const engineServices = ["accounts", "users", "push", "presence", "inbox", "social", "agents", "conversation", "conversations", "groups", "webhooks", "systemAgent", "media"];

export async function startParley(options: ParleyOptions): Promise<Parley> {
  const { config } = options;
  const roles = options.roles ?? ["edge", "engine"];
  const clock = options.clock ?? systemClock;
  const broker = new moleculer.ServiceBroker(brokerOptions({ logLevel: config.logLevel, ...options.broker }));
  const cleanups: (() => Promise<void>)[] = [];
  let fanOuts: FanOuts | undefined;

  if (roles.includes("engine")) {
    const logger = broker.getLogger("engine");
    const opened = await openSqliteStore(config.dataDir);
    const store = options.adapters?.store ? options.adapters.store(opened) : opened;
    const ephemeral = new MemoryEphemeralState(clock);
    const codeSender = createCodeSender(config.codeDelivery, { info: (message) => logger.info(message) });
    cleanups.push(() => codeSender.close(), () => ephemeral.close(), () => store.close());
    fanOuts = new FanOuts(store, clock);
    // The node's name outlives the process, so a restarted node takes its own leases back at once.
    const ownership = new Ownership(store.leases, clock, options.broker?.nodeID ?? "embedded");
    ownership.start((err) => logger.warn(`renewing ownership leases failed: ${String(err)}`));
    // Released before the store closes (cleanups run in reverse), so another node takes over at once.
    cleanups.push(() => ownership.stop());
    const deps: EngineDeps = { config, clock, store, ephemeral, codeSender, pushNotifier: options.adapters?.pushNotifier ?? new LogPushNotifier(logger), fanOuts, ownership };
    broker.createService(accountsService(deps));
    broker.createService(usersService(deps));
    broker.createService(pushService(deps));
    broker.createService(presenceService());
    broker.createService(inboxService(deps));
    broker.createService(socialService(deps));
    broker.createService(agentsService(deps));
    broker.createService(conversationService(deps));
    broker.createService(conversationsService(deps));
    broker.createService(groupsService(deps));
    broker.createService(mediaService(deps, await LocalDiskBlobStore.open(config.dataDir)));
    broker.createService(webhookService({ allowPrivateNetworks: config.webhookAllowPrivateNetworks }));
    broker.createService(systemAgentService(deps));
    broker.createService(
      webhookDispatcherService({
        queue: store.webhookJobs,
        // Read at send time, so a regenerated key or a mode switch applies to jobs already queued.
        resolveTarget: async (agentUserId) => webhookTarget(await store.agents.getAgent(agentUserId)),
        now: () => clock.now(),
        allowPrivateNetworks: config.webhookAllowPrivateNetworks,
        policy: { concurrency: config.webhookConcurrency, ...options.webhooks },
      }),
    );
  }

  let server: Server | undefined;
  let drain: HttpDrain | undefined;
  let ready = false;
  if (roles.includes("edge")) {
    let api: ApiHandle | undefined;
    const downloads = mediaDownloadHandler(broker, broker.getLogger("media-http"));
    const timeouts = { ...defaultHttpTimeouts, ...options.http };
    const headersTimeout = Math.min(timeouts.headersTimeoutMs, timeouts.requestTimeoutMs);
    const serverOptions = {
      keepAliveTimeout: 65_000,
      headersTimeout,
      requestTimeout: timeouts.requestTimeoutMs,
      // Node checks both limits in a sweep at this interval (30 s unless told), which would
      // otherwise add up to 30 s to each of them.
      connectionsCheckingInterval: Math.min(5_000, Math.ceil(headersTimeout / 4)),
    };
    const logger = broker.getLogger("http");
    const answerError = (res: ServerResponse, status: number, entry: CatalogueEntry) => {
      if (res.headersSent) res.destroy();
      else res.writeHead(status, { "content-type": "application/json", connection: "close" }).end(errorBodyJson(entry));
    };
    const route = (req: IncomingMessage, res: ServerResponse) => {
      // Checked for every path, before anything reads the Host (Connect builds a URL from it).
      if (!isServableHost(req.headers.host)) {
        answerError(res, 400, Errors.invalidHost);
        return;
      }
      const path = (req.url ?? "").split("?", 1)[0];
      if (path === "/healthz") {
        res.writeHead(ready ? 200 : 503, { "content-type": "text/plain" }).end(ready ? "ok\n" : "unavailable\n");
        return;
      }
      if (path === "/metrics" && req.method === "GET") {
        metricsRegistry.metrics().then(
          (text) => res.writeHead(200, { "content-type": metricsRegistry.contentType }).end(text),
          () => res.writeHead(500).end(),
        );
        return;
      }
      if (path.startsWith(mediaPathPrefix)) {
        downloads(req, res);
        return;
      }
      if (api?.handle(req, res)) return;
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    };
    server = createServer(serverOptions, (req, res) => {
      // A throw here would end the process: whatever escapes a route costs only its request.
      try {
        route(req, res);
      } catch (err) {
        logger.error("failed to answer an HTTP request", err);
        answerError(res, 500, Errors.internal);
      }
    });
    drain = new HttpDrain(server);
    broker.createService(identityCacheService(clock));
    broker.createService(apiService((handle) => (api = handle), { ...options.api, trustedProxies: config.trustedProxies }));
    broker.createService(
      gatewayService({
        ...options.gateway,
        server,
        trustedProxies: config.trustedProxies,
        authenticate: (token, clientIp) => identityCacheOf(broker).resolve(token, clientIp),
        onConnectionCountChange: (delta) => openSockets.inc(delta),
      }),
    );
  }

  await broker.start();
  // Events a crash cut short reach their streams before anything new is served, so they keep
  // their place in front of every later event.
  if (fanOuts) {
    const finished = await fanOuts.finishRecorded(broker);
    const posted = await fanOuts.postRecordedSystemMessages(broker);
    if (finished + posted > 0) broker.logger.info(`finished ${finished} event fan-out(s) and posted ${posted} system message(s) cut short before the last stop`);
  }
  let port = 0;
  if (server) {
    await broker.waitForServices(engineServices, 30_000);
    const listening = server;
    await new Promise<void>((resolve, reject) => {
      listening.once("error", reject);
      listening.listen(config.port, config.host, () => {
        listening.off("error", reject);
        // A failed accept (out of file descriptors under a flood of connections) is reported
        // here; without a listener it would end the process.
        listening.on("error", (err) => broker.getLogger("http").error("HTTP server error", err));
        resolve();
      });
    });
    port = (listening.address() as AddressInfo).port;
    ready = true;
  }

  let stopping: Promise<void> | undefined;
  let cutDrain = () => {};
  return {
    broker,
    port,
    url: `http://${config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host}:${port}`,
    stop() {
      if (stopping) {
        cutDrain();
        return stopping;
      }
      stopping = (async () => {
        ready = false;
        const cut = new Promise<void>((resolve) => (cutDrain = resolve));
        if (drain) {
          let timer: NodeJS.Timeout | undefined;
          if (options.healthGraceMs) await Promise.race([cut, new Promise((resolve) => (timer = setTimeout(resolve, options.healthGraceMs)))]);
          clearTimeout(timer);
          const dropped = await drain.drain(config.drainTimeoutMs, cut);
          if (dropped > 0) broker.logger.warn(`shutdown: cut ${dropped} HTTP connection(s) still busy when the drain ended`);
        }
        // Services stop only once no request can reach them; the gateway closes its sockets here.
        await broker.stop();
        await drain?.close();
        for (const cleanup of cleanups.reverse()) await cleanup();
      })();
      return stopping;
    },
  };
}
