// The composition root: picks the adapters behind every port once, builds the services of the
// requested roles into one Moleculer broker, and serves HTTP on one port through the edge front
// SOCKET_DRIVER picks (edge/): the Connect API on an api node, /ws on a gateway node, /healthz and
// /metrics on every node. An api node also serves gRPC on GRPC_PORT (edge/grpc-front.ts). `npm
// start` runs all roles in one process; ROLES picks some.
import moleculer, { type ServiceBroker } from "moleculer";
import { apiService, type ApiHandle, type ApiOptions } from "./api/api-service.js";
import { identityCacheOf, identityCacheService } from "./api/identity-cache.js";
import { mediaDownloadHandler } from "./edge/media-http.js";
import { authService } from "./engine/auth/auth-service.js";
import { agentsService } from "./engine/agents/agent-service.js";
import { messagesService } from "./engine/messages/message-service.js";
import { conversationsService } from "./engine/conversations/conversation-service.js";
import { groupsService } from "./engine/groups/group-service.js";
import { openBlobStore } from "./ports/blob-store/open-blob-store.js";
import { mediaService } from "./engine/media/media-service.js";
import { contactsService } from "./engine/contacts/contact-service.js";
import { systemAgentService } from "./engine/agents/system-agent.js";
import { systemClock, type Clock } from "./shared/clock.js";
import { createCodeSender } from "./ports/code-delivery/open-code-sender.js";
import type { EngineDeps } from "./engine/deps.js";
import type { EphemeralState } from "./ports/ephemeral/ephemeral-state.js";
import { openEphemeralState } from "./ports/ephemeral/open-ephemeral-state.js";
import { openPresenceRegistry } from "./ports/presence/open-presence-registry.js";
import { CachedPresenceRegistry } from "./ports/presence/cached-presence-registry.js";
import type { PresenceRegistry } from "./ports/presence/presence-registry.js";
import { LiveRouter } from "./engine/delivery/live-router.js";
import { webhookTarget } from "./engine/agents/event-routing.js";
import { FanOuts } from "./engine/delivery/fan-out.js";
import { FanOutIds } from "./engine/delivery/fan-out-ids.js";
import { watchEngines } from "./engine/engine-watch.js";
import { leaseTimings, newLeaseHolder, Ownership, OwnershipPolicy } from "./engine/ownership.js";
import { userStreamKey } from "./shared/shards.js";
import { announceToMesh, ClusterPlacement, coalescedMeshWrites, engineNodes, keysByOwner, outnumberEarlierInstances, ownerForwarding, settleWithMesh, withoutConnectPause } from "./engine/shard-owners.js";
import { syncService } from "./engine/sync/inbox.js";
import { openPushNotifier } from "./ports/push-notifier/open-push-notifier.js";
import { presenceService } from "./engine/presence-service.js";
import { pushService } from "./engine/push/push-service.js";
import { openStore } from "./ports/store/open-store.js";
import type { Store } from "./ports/store/store.js";
import { usersService } from "./engine/users/user-service.js";
import type { ConnectionPolicy } from "./gateway/connection.js";
import { gatewayService } from "./gateway/gateway-service.js";
import { webhookService } from "./webhooks/webhook-service.js";
import { webhookDispatcherService, type DispatcherPolicy } from "./webhooks/dispatcher.js";
import { WebhookFleetMember, WebhookTopic, deliveryLockMs, deliveryLocks, webhookFleetGroup, webhookQueuedRecord, webhookTopicName } from "./webhooks/fleet.js";
import { webhookTimeoutMs } from "./webhooks/delivery.js";
import { openUpdateLog } from "./ports/update-log/open-update-log.js";
import type { UpdateLog } from "./ports/update-log/update-log.js";
import { defaultHttpTimeouts, type EdgeFront, type EdgeRoutes, type HttpTimeouts } from "./edge/edge-http.js";
import { grpcFront } from "./edge/grpc-front.js";
import { nodeFront } from "./edge/node-front.js";
import { wholeRequestApi, type WholeRequestApi } from "./edge/whole-request-api.js";
import { uwsFront } from "./edge/uws-front.js";
import { loadNativeUws } from "./gateway/uws-native.js";
import { brokerOptions, transporterOf, type BrokerSettings } from "./moleculer.config.js";
import { roles as allRoles, type ParleyConfig, type Role } from "./shared/config.js";
import { addressList } from "./shared/ip.js";
import { labelMetricsWithNode, openSockets } from "./shared/metrics.js";
import { measuredUpdateLog } from "./ports/update-log/measured-update-log.js";
import { backgroundFailed, defaultRetryPolicy, retryInBackground, runInBackground } from "./shared/background.js";
import { slowStartMs, StartupTimings } from "./startup-timings.js";

export type { Role } from "./shared/config.js";

export interface ParleyOptions {
  config: ParleyConfig;
  /** Instead of the configuration's (ROLES). */
  roles?: readonly Role[];
  clock?: Clock;
  broker?: BrokerSettings;
  /**
   * How long stop() keeps accepting connections while /healthz answers 503, so load balancers
   * stop routing here before connections are refused; none by default.
   */
  healthGraceMs?: number;
  /** Where the start records its steps; a caller that starts nodes passes one to see where a slow start is. */
  startupTimings?: StartupTimings;
  /** Gateway connection limits (timeouts, send queue size); defaults suit production. */
  gateway?: Partial<ConnectionPolicy>;
  /** Webhook dispatch timing (retry base, answer limit, polling); defaults follow the spec. */
  webhooks?: Partial<DispatcherPolicy>;
  /** Adapters to use instead of the configured ones (tests record what leaves the engine, or make the store fail). */
  adapters?: Partial<Pick<EngineDeps, "pushNotifier">> & {
    store?: (opened: Store) => Store;
    /** Shared by brokers that stand for separate processes inside one test process (Redis stands for them in a real cluster); not closed by stop(). */
    ephemeral?: EphemeralState;
    presence?: PresenceRegistry;
    log?: UpdateLog;
  };
  /** How long clients may take to send requests; defaults suit production. */
  http?: Partial<HttpTimeouts>;
  /** How long a node of a cluster waits for its start-up recovery pass before serving anyway (startupRecoveryWaitMs by default). */
  startupRecoveryWaitMs?: number;
  /** API tier switches; `leanUnary: false` serves every RPC through Connect-ES (test/lean-rpc-wire.test.ts compares both). */
  api?: Pick<ApiOptions, "leanUnary">;
}

export interface Parley {
  broker: ServiceBroker;
  /** The bound HTTP port. */
  port: number;
  /** Base URL of the node's HTTP port, e.g. http://127.0.0.1:8080. */
  url: string;
  /** The bound gRPC port (GRPC_PORT) of a node serving the API; undefined when it serves none. */
  grpcPort: number | undefined;
  /**
   * Stops gracefully: /healthz answers 503, new connections are refused, requests in flight get
   * up to `config.drainTimeoutMs` to finish, then the services stop (WebSockets close with 1001)
   * and the store closes. Called again while the first stop drains, it cuts the drain short.
   */
  stop(): Promise<void>;
}

/** How long a start waits for its first try at the webhook topic before serving without it. */
const webhookTopicWaitMs = 5_000;

/**
 * Consumer-group timing in a cluster: a member that stops heartbeating (a killed webhooks node)
 * hands its agents over after 10 s; a rebalance waits up to 15 s for the others to rejoin.
 */
const clusterGroupTimings = { sessionTimeoutMs: 10_000, heartbeatIntervalMs: 1_000, rebalanceTimeoutMs: 15_000 };

/**
 * How long a node of a cluster waits for its start-up recovery pass before it serves anyway (the
 * pass goes on): a peer that does not answer holds a call for the broker's request timeout (30 s).
 */
const startupRecoveryWaitMs = 10_000;

/** What the api and gateway roles call; they answer requests only once these are reachable. */
const engineServices = ["auth", "users", "push", "presence", "sync", "contacts", "agents", "messages", "conversations", "groups", "webhooks", "systemAgent", "media"];

export async function startParley(options: ParleyOptions): Promise<Parley> {
  const { config } = options;
  const timings = options.startupTimings ?? new StartupTimings();
  const roles = options.roles ?? config.cluster.roles;
  const clock = options.clock ?? systemClock;
  const servesClients = roles.includes("api") || roles.includes("gateway");
  // Before anything opens: a server asked for uWS refuses to start when only its JS fallback
  // would load (gateway/uws-native.ts).
  const uws = servesClients && config.socketDriver === "uws" ? loadNativeUws() : undefined;
  const everyRole = allRoles.every((role) => roles.includes(role));
  const brokerSettings = brokerOptions({
    logLevel: config.logLevel,
    nodeID: config.cluster.transporter || !everyRole ? config.cluster.nodeId : undefined,
    transporter: transporterOf(config.cluster.transporter, config.cluster.nodeId),
    ...options.broker,
  });
  /** How long a peer may take to be heard from: Moleculer's heartbeat timeout. */
  const discoveryMs = (brokerSettings.heartbeatTimeout ?? 15) * 1000;
  // The node's name outlives the process, so a restarted node takes its own leases back at once;
  // peers read the instance to tell a lease of its earlier process (ClusterPlacement.isGone).
  const leaseHolder = newLeaseHolder(options.broker?.nodeID ?? config.cluster.nodeId);
  // Peers read the roles to know which nodes to wait for at start (settleWithMesh).
  const broker = new moleculer.ServiceBroker({ ...brokerSettings, metadata: { roles, leaseInstance: leaseHolder.instance } });
  outnumberEarlierInstances(broker);
  withoutConnectPause(broker);
  coalescedMeshWrites(broker);
  const createService = (schema: moleculer.ServiceSchema) => broker.createService(timings.service(schema));
  const cleanups: (() => Promise<void>)[] = [];
  // First, before anything is opened: reading the provider credentials stops a start that has bad
  // ones, instead of failing the first offline push. No connection is made until a push needs one.
  const pushNotifier = roles.includes("engine") ? (options.adapters?.pushNotifier ?? openPushNotifier(config.push, broker.getLogger("push"))) : undefined;
  if (pushNotifier) cleanups.push(async () => pushNotifier.close?.());
  // The update log: Kafka in a cluster, in memory when one process runs everything.
  let log: UpdateLog | undefined;
  let webhookTopicFirstTry: Promise<unknown> | undefined;
  const webhookTopic = webhookTopicName(config.cluster.kafkaTopicPrefix);
  if (roles.includes("engine") || roles.includes("webhooks")) {
    log = options.adapters?.log;
    if (!log) {
      const opened = openUpdateLog(config.cluster.kafkaBrokers, { clientId: `parley-${options.broker?.nodeID ?? config.cluster.nodeId}`, group: clusterGroupTimings });
      cleanups.push(() => opened.close());
      log = opened;
    }
    log = measuredUpdateLog(log);
    // Kafka out of reach at start is no reason not to serve: until the topic is there, webhook
    // announcements fail (counted; the dispatcher's poll finds the jobs) and the fleet's join is
    // retried. The start waits for the first try a moment before it serves, so a reachable Kafka
    // has it at once; first, so that the try (about 0.8 s on a busy machine) overlaps the store's
    // and Redis's connections instead of adding to how long a restarted node is away.
    const topicLog = log;
    const webhookTopicReady = retryInBackground("webhook_topic", () => topicLog.ensureTopic(webhookTopic, WebhookTopic.partitions), broker.logger, "creating the webhook topic");
    cleanups.push(() => webhookTopicReady.stop());
    webhookTopicFirstTry = webhookTopicReady.firstTry;
  }

  let fanOuts: FanOuts | undefined;
  let ownership: Ownership | undefined;
  let store: Store | undefined;
  if (roles.includes("engine") || roles.includes("webhooks")) {
    timings.next("store");
    const opened = await openStore(config.store, config.dataDir);
    store = options.adapters?.store ? options.adapters.store(opened) : opened;
    cleanups.push(() => store!.close());
  }

  // The clients reconnect by themselves; one line per failed connection attempt, not per command.
  const redisTrouble = (error: Error) => broker.logger.warn(`redis: ${error.message}`);
  let presence: PresenceRegistry | undefined;
  let presenceCache: CachedPresenceRegistry | undefined;
  if (roles.includes("engine") || roles.includes("gateway")) {
    timings.next("presence");
    presence = options.adapters?.presence;
    if (!presence) {
      const opened = await openPresenceRegistry(config.cluster, redisTrouble);
      cleanups.push(() => opened.close());
      presence = opened;
    }
    // An engine among other nodes asks the shared registry once per user and keeps the answer,
    // which the gateways' announcements keep true (a push costs no Redis round trip).
    if (roles.includes("engine") && brokerSettings.transporter) presence = presenceCache = new CachedPresenceRegistry(presence);
  }

  // Short-lived shared state: Redis in a cluster, in memory when one process runs everything.
  let ephemeral: EphemeralState | undefined;
  if (roles.includes("engine") || roles.includes("webhooks")) {
    timings.next("ephemeral state");
    ephemeral = options.adapters?.ephemeral;
    if (!ephemeral) {
      const opened = await openEphemeralState(config.cluster, clock, redisTrouble);
      cleanups.push(() => opened.close());
      ephemeral = opened;
    }
  }

  if (roles.includes("engine") && store && presence && log && ephemeral && pushNotifier) {
    const logger = broker.getLogger("engine");
    const codeSender = createCodeSender(config.codeDelivery, { info: (message) => logger.info(message) });
    cleanups.push(() => codeSender.close());
    const placement = new ClusterPlacement(broker, discoveryMs);
    // Before the engine's services are created: their sharded actions are wrapped as they are.
    if (brokerSettings.transporter) broker.middlewares.add(ownerForwarding(broker));
    const engineOwnership = new Ownership(store.leases, clock, leaseHolder, { ...OwnershipPolicy, ...leaseTimings(config.shardLeaseMs) });
    ownership = engineOwnership;
    timings.next("fan-out id slot");
    const fanOutIds = await FanOutIds.claim(store.leases, clock, engineOwnership.holder, {
      policy: leaseTimings(config.shardLeaseMs),
      onRenewalError: (err) => backgroundFailed("fanout_id_renewal", err, logger, "renewing the fan-out id slot"),
    });
    cleanups.push(() => fanOutIds.stop());
    fanOuts = new FanOuts(store, clock, fanOutIds, (recipients) => keysByOwner(recipients, userStreamKey, placement.engineNodes()));
    const unsampleFanOuts = fanOuts.sampleBacklog();
    cleanups.push(async () => unsampleFanOuts());
    engineOwnership.start((err) => backgroundFailed("ownership_renewal", err, logger, "renewing ownership leases"));
    // Shards placed on a node that joined are given up at once, so it takes them without waiting.
    const rebalance = () => void engineOwnership.place(placement).catch((err: unknown) => backgroundFailed("ownership_rebalance", err, logger, "giving up shards placed elsewhere"));
    broker.localBus.on("$node.**", rebalance);
    broker.localBus.on("$services.changed", rebalance);
    // Released before the store closes (cleanups run in reverse), so another node takes over at once.
    cleanups.push(() => engineOwnership.stop());
    const deps: EngineDeps = {
      config,
      clock,
      store,
      ephemeral,
      codeSender,
      pushNotifier,
      fanOuts,
      ownership: engineOwnership,
      presence,
      live: new LiveRouter(broker, presence),
      webhookQueued: (agentUserId) =>
        void log.append(webhookTopic, [webhookQueuedRecord(agentUserId)]).catch((err: unknown) => backgroundFailed("webhook_announce", err, logger, "announcing webhook jobs (the fleet's poll finds them)")),
    };
    createService(authService(deps));
    createService(usersService(deps));
    createService(pushService(deps));
    createService(presenceService(presence, presenceCache));
    createService(syncService(deps));
    createService(contactsService(deps));
    createService(agentsService(deps));
    createService(messagesService(deps));
    createService(conversationsService(deps));
    createService(groupsService(deps));
    const { blobs } = config.cluster;
    timings.next("blob store");
    createService(mediaService(deps, await openBlobStore(blobs, config.dataDir)));
    createService(systemAgentService(deps));
  }

  if (roles.includes("webhooks") && store && log && ephemeral) {
    const { agents, webhookJobs } = store;
    createService(webhookService({ allowPrivateNetworks: config.webhookAllowPrivateNetworks }));
    createService(
      webhookDispatcherService({
        queue: webhookJobs,
        // Read at send time, so a regenerated key or a mode switch applies to jobs already queued.
        resolveTarget: async (agentUserId) => webhookTarget(await agents.getAgent(agentUserId)),
        now: () => clock.now(),
        allowPrivateNetworks: config.webhookAllowPrivateNetworks,
        policy: { concurrency: config.webhookConcurrency, ...options.webhooks },
        fleet: new WebhookFleetMember(log, webhookTopic, webhookFleetGroup(config.cluster.kafkaTopicPrefix)),
        claim: deliveryLocks(ephemeral, deliveryLockMs(options.webhooks?.timeoutMs ?? webhookTimeoutMs)),
      }),
    );
  }

  // Every node serves /healthz and /metrics (an orchestrator probes each process); only an api
  // node answers the API and media downloads, only a gateway node accepts /ws.
  let ready = false;
  let api: ApiHandle | undefined;
  let wholeRequests: WholeRequestApi | undefined;
  const routes: EdgeRoutes = {
    whyNotReady: () => {
      if (!ready) return "not serving";
      // What sends need beyond this process answering: an engine to route to, and an engine
      // holding (or able to take) the keys placed on it.
      if (roles.includes("api") && brokerSettings.transporter && engineNodes(broker).length === 0) return "no engine node is reachable";
      return ownership?.whyNotServing();
    },
    downloads: roles.includes("api") ? mediaDownloadHandler(broker, broker.getLogger("media-http")) : (_req, reply) => void reply.send(404, { "content-type": "text/plain" }, "not found\n"),
    logger: broker.getLogger("http"),
  };
  const timeouts = { ...defaultHttpTimeouts, ...options.http };
  const trustedProxies = config.trustedProxies.length ? addressList(config.trustedProxies) : undefined;
  const front: EdgeFront = uws
    ? uwsFront({ uws, routes, timeouts, trustedProxies, api: () => wholeRequests, logger: routes.logger })
    : nodeFront({ routes, timeouts, api: (req, res) => api?.handle(req, res) ?? false, logger: routes.logger });
  const grpc =
    roles.includes("api") && config.grpcPort !== undefined
      ? grpcFront({ api: () => api, httpPort: () => port, timeouts, logger: broker.getLogger("grpc") })
      : undefined;
  if (servesClients) createService(identityCacheService(clock));
  if (roles.includes("api")) {
    createService(
      apiService(
        (handle) => {
          api = handle;
          wholeRequests = wholeRequestApi(handle);
        },
        { ...options.api, trustedProxies: config.trustedProxies },
      ),
    );
  }
  if (roles.includes("gateway") && presence) {
    createService(
      gatewayService({
        presence,
        ...options.gateway,
        sockets: front.sockets,
        trustedProxies: config.trustedProxies,
        authenticate: (token, clientIp) => identityCacheOf(broker).resolve(token, clientIp),
        onConnectionCountChange: (delta) => openSockets.inc(delta),
      }),
    );
  }

  timings.next("webhook topic");
  if (webhookTopicFirstTry) await Promise.race([webhookTopicFirstTry, new Promise((resolve) => setTimeout(resolve, webhookTopicWaitMs).unref())]);
  timings.next("services");
  await broker.start();
  if (brokerSettings.transporter) {
    // Its services to every peer it already reached, before waiting for the rest: a restarted
    // engine was otherwise unknown to the api nodes until it had heard from every other engine.
    announceToMesh(broker);
    timings.next("mesh");
    const missing = await settleWithMesh(broker, discoveryMs);
    if (missing.length > 0) broker.logger.warn(`serving without ${missing.join(", ")}: not heard from within ${discoveryMs / 1000} s; each joins when it comes up`);
    announceToMesh(broker);
    const stopWatchingEngines = watchEngines(broker);
    cleanups.push(async () => stopWatchingEngines());
  }
  // Events a crash cut short reach their streams before anything new is served, so they keep
  // their place in front of every later event. In a cluster the other engines are delivering what
  // they recorded, and every engine starting at once must not finish (or post) the same records:
  // each finishes what its own earlier instance left (the id slot it took back says which), the
  // sweep's leader also what is old enough to have been cut short; a conversation's by its owner,
  // as the sweep's timer does; an owner also finishes its conversation's before its next write.
  // A failure of this pass (a lease another node still holds, a store timeout, a peer that does
  // not answer) must not keep the node from serving, nor end it: it is logged, counted and retried
  // in the background, and the periodic sweep would also finish the records.
  if (fanOuts && ownership) {
    timings.next("startup recovery");
    const [recorded, owner] = [fanOuts, ownership];
    const what = "finishing the events the last stop cut short";
    if (brokerSettings.transporter) {
      // This pass goes through each conversation's owner, so it may go on while the node serves:
      // a peer that does not answer holds a call for the request timeout (30 s), and the node
      // serves after startupRecoveryWaitMs whatever the pass's state.
      const recovery = retryInBackground(
        "startup_recovery",
        async () => {
          if (await owner.leads("fan-out-sweep")) await recorded.sweep(broker);
          else await recorded.finishInherited(broker);
        },
        broker.logger,
        what,
      );
      cleanups.push(() => recovery.stop());
      const waitMs = options.startupRecoveryWaitMs ?? startupRecoveryWaitMs;
      let timer: NodeJS.Timeout | undefined;
      const tried = await Promise.race([recovery.firstTry, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), waitMs)))]);
      clearTimeout(timer);
      if (tried === undefined) broker.logger.warn(`${what} takes over ${waitMs / 1000} s; serving meanwhile`);
    } else {
      // Alone, before serving, every record in the order recorded, past the actors: nothing else
      // writes yet. Once serving, it is retried by the sweep's path, through each conversation's
      // actor, so the events keep their place in front of new ones.
      const finishedAll = await runInBackground(
        "startup_recovery",
        async () => {
          const finished = await recorded.finishRecorded(broker);
          const posted = await recorded.postRecordedSystemMessages(broker);
          if (finished + posted > 0) broker.logger.info(`finished ${finished} event fan-out(s) and posted ${posted} system message(s) cut short before the last stop`);
        },
        broker.logger,
        what,
      );
      if (!finishedAll) {
        const recovery = retryInBackground("startup_recovery", () => recorded.sweep(broker), broker.logger, what, { ...defaultRetryPolicy, waitFirst: true });
        cleanups.push(() => recovery.stop());
      }
    }
  }
  timings.next("engine services reachable");
  if (servesClients) await broker.waitForServices(engineServices, 30_000);
  timings.next("listening");
  const port = await front.listen(config.host, config.port);
  let grpcPort: number | undefined;
  try {
    grpcPort = await grpc?.listen(config.host, config.grpcPort ?? 0).catch(async (err: unknown) => {
      if (!(config.grpcPortIsDefault && (err as NodeJS.ErrnoException).code === "EADDRINUSE")) throw err;
      broker.logger.warn(`gRPC is not served: its default port ${config.grpcPort} is in use by another process; set GRPC_PORT to serve it`);
      await grpc?.close();
      return undefined;
    });
  } catch (err) {
    // Nothing has been served yet: release what started, so the port can be tried again.
    await front.close();
    await broker.stop();
    for (const cleanup of cleanups.reverse()) await cleanup();
    throw err;
  }
  // From the first scrape on, and not for a start that failed (a test process starts many nodes).
  const unlabelMetrics = labelMetricsWithNode(options.broker?.nodeID ?? config.cluster.nodeId, roles);
  cleanups.push(async () => unlabelMetrics());
  ready = true;
  timings.end();
  if (timings.elapsedMs > slowStartMs) broker.logger.warn(timings.describe());
  else broker.logger.info(timings.describe());

  let stopping: Promise<void> | undefined;
  let cutDrain = () => {};
  return {
    broker,
    port,
    url: `http://${config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host}:${port}`,
    grpcPort,
    stop() {
      if (stopping) {
        cutDrain();
        return stopping;
      }
      stopping = (async () => {
        ready = false;
        const cut = new Promise<void>((resolve) => (cutDrain = resolve));
        {
          let timer: NodeJS.Timeout | undefined;
          if (options.healthGraceMs) await Promise.race([cut, new Promise((resolve) => (timer = setTimeout(resolve, options.healthGraceMs)))]);
          clearTimeout(timer);
          const [dropped, droppedGrpc] = await Promise.all([front.drain(config.drainTimeoutMs, cut), grpc?.drain(config.drainTimeoutMs, cut) ?? 0]);
          if (dropped > 0) broker.logger.warn(`shutdown: cut ${dropped} HTTP connection(s) still busy when the drain ended`);
          if (droppedGrpc > 0) broker.logger.warn(`shutdown: cut ${droppedGrpc} gRPC connection(s) still busy when the drain ended`);
        }
        // Services stop only once no request can reach them; the gateway closes its sockets here.
        await broker.stop();
        await front.close();
        await grpc?.close();
        for (const cleanup of cleanups.reverse()) await cleanup();
      })();
      return stopping;
    },
  };
}
