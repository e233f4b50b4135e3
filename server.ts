// The composition root: picks the adapters behind every port once, builds the services of the
// requested roles into one Moleculer broker, and serves HTTP (Connect, /ws, health, metrics) on
// one port, through the edge front SOCKET_DRIVER picks (edge/). `npm start` runs all roles in one
// process; tests and multi-node setups pick roles.
import moleculer, { type ServiceBroker } from "moleculer";
import { apiService, type ApiHandle, type ApiOptions } from "./api/api-service.js";
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
import { openStore } from "./engine/store/open-store.js";
import type { Store } from "./engine/store/store.js";
import { usersService } from "./engine/users.js";
import type { ConnectionPolicy } from "./gateway/connection.js";
import { gatewayService } from "./gateway/gateway-service.js";
import { webhookService } from "./gateway/webhooks/webhook-service.js";
import { webhookDispatcherService, type DispatcherPolicy } from "./gateway/webhooks/dispatcher.js";
import { defaultHttpTimeouts, type EdgeFront, type EdgeRoutes, type HttpTimeouts } from "./edge/edge-http.js";
import { nodeFront } from "./edge/node-front.js";
import { wholeRequestApi, type WholeRequestApi } from "./edge/unary-http.js";
import { uwsFront } from "./edge/uws-front.js";
import { loadNativeUws } from "./edge/uws-native.js";
import { brokerOptions, type BrokerSettings } from "./moleculer.config.js";
import type { ParleyConfig } from "./shared/config.js";
import { addressList } from "./shared/ip.js";
import { openSockets } from "./shared/metrics.js";

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
  // Before anything opens: a server asked for uWS refuses to start when only its JS fallback
  // would load (edge/uws-native.ts).
  const uws = roles.includes("edge") && config.socketDriver === "uws" ? loadNativeUws() : undefined;
  const broker = new moleculer.ServiceBroker(brokerOptions({ logLevel: config.logLevel, ...options.broker }));
  const cleanups: (() => Promise<void>)[] = [];
  let fanOuts: FanOuts | undefined;

  if (roles.includes("engine")) {
    const logger = broker.getLogger("engine");
    const opened = await openStore(config.store, config.dataDir);
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

  let front: EdgeFront | undefined;
  let ready = false;
  if (roles.includes("edge")) {
    let api: ApiHandle | undefined;
    let wholeRequests: WholeRequestApi | undefined;
    const logger = broker.getLogger("http");
    const routes: EdgeRoutes = { ready: () => ready, downloads: mediaDownloadHandler(broker, broker.getLogger("media-http")), logger };
    const timeouts = { ...defaultHttpTimeouts, ...options.http };
    const trustedProxies = config.trustedProxies.length ? addressList(config.trustedProxies) : undefined;
    front = uws
      ? uwsFront({ uws, routes, timeouts, trustedProxies, api: () => wholeRequests, logger })
      : nodeFront({ routes, timeouts, api: (req, res) => api?.handle(req, res) ?? false, logger });
    broker.createService(identityCacheService(clock));
    broker.createService(
      apiService(
        (handle) => {
          api = handle;
          wholeRequests = wholeRequestApi(handle);
        },
        { ...options.api, trustedProxies: config.trustedProxies },
      ),
    );
    broker.createService(
      gatewayService({
        ...options.gateway,
        sockets: front.sockets,
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
  if (front) {
    await broker.waitForServices(engineServices, 30_000);
    port = await front.listen(config.host, config.port);
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
        if (front) {
          let timer: NodeJS.Timeout | undefined;
          if (options.healthGraceMs) await Promise.race([cut, new Promise((resolve) => (timer = setTimeout(resolve, options.healthGraceMs)))]);
          clearTimeout(timer);
          const dropped = await front.drain(config.drainTimeoutMs, cut);
          if (dropped > 0) broker.logger.warn(`shutdown: cut ${dropped} HTTP connection(s) still busy when the drain ended`);
        }
        // Services stop only once no request can reach them; the gateway closes its sockets here.
        await broker.stop();
        await front?.close();
        for (const cleanup of cleanups.reverse()) await cleanup();
      })();
      return stopping;
    },
  };
}
