// `npm run services -- up <name>...` starts the named backing services with their data under
// DATA_DIR/services and returns once each accepts connections; `npm run services -- down [name...]`
// stops what `up` started (all of them without names). Redis listens on REDIS_PORT (default 6379).
//
// The nginx front reads its upstreams from the environment (the cluster's nodes are not services
// this script starts): NGINX_LISTEN (host:port, default 127.0.0.1:8000), NGINX_API_UPSTREAMS
// (comma-separated host:port of the api nodes, default 127.0.0.1:8080), NGINX_GATEWAY_UPSTREAMS
// (default: the api list), NGINX_HEALTH_UPSTREAM (default: the first api node), and for a gRPC
// listener on the same host NGINX_GRPC_PORT with NGINX_GRPC_UPSTREAMS (the api nodes' GRPC_PORTs;
// none unless both are set). `up nginx` again with other lists reloads the running front (SIGHUP)
// instead of restarting it.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfig } from "../../shared/config.js";
import { cassandraHost, cassandraPort, startCassandra, stopCassandra } from "./cassandra.js";
import { kafkaVersion, startKafka, stopKafka } from "./kafka.js";
import { defaultRedisPort, redisHost, startRedis, stopRedis } from "./redis.js";
import { defaultS3Port, minioVersion, s3Credentials, startS3, stopS3 } from "./s3.js";
import { configDiffers, nginxPaths, reloadNginx, renderFrontConfig, startNginx, stopNginx } from "./nginx.js";

interface BackingService {
  up(dataDir: string): Promise<string>;
  down(dataDir: string): Promise<boolean>;
}

function redisPortFrom(env: NodeJS.ProcessEnv): number {
  const text = env.REDIS_PORT;
  if (text === undefined || text === "") return defaultRedisPort;
  const port = Number(text);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`REDIS_PORT must be a port number; got ${JSON.stringify(text)}`);
  return port;
}

const services: Record<string, BackingService> = {
  cassandra: {
    async up(dataDir) {
      const began = performance.now();
      const instance = await startCassandra(dataDir);
      const seconds = ((performance.now() - began) / 1000).toFixed(1);
      const cql = instance.supported.get("CQL_VERSION")?.join(", ") ?? "?";
      const how = instance.started ? `started (pid ${instance.pid}), answering CQL after ${seconds} s` : `already running (pid ${instance.pid})`;
      return `cassandra ${cassandraHost}:${cassandraPort} ${how}; CQL ${cql}`;
    },
    down: stopCassandra,
  },
  kafka: {
    async up(dataDir) {
      const began = performance.now();
      const instance = await startKafka(dataDir);
      const seconds = ((performance.now() - began) / 1000).toFixed(1);
      const how = instance.started ? `started (pid ${instance.pid}), answering metadata after ${seconds} s` : `already running (pid ${instance.pid})`;
      return `kafka ${instance.bootstrap} ${how}; Kafka ${kafkaVersion} (KRaft)`;
    },
    down: (dataDir) => stopKafka(dataDir),
  },
  redis: {
    async up(dataDir) {
      const began = performance.now();
      const instance = await startRedis(dataDir, { port: redisPortFrom(process.env) });
      const milliseconds = (performance.now() - began).toFixed(0);
      const how = instance.started ? `started (pid ${instance.pid}), answering PING after ${milliseconds} ms` : `already running (pid ${instance.pid})`;
      return `redis ${redisHost}:${instance.port} ${how}; Debian package ${instance.version}`;
    },
    down: stopRedis,
  },
  s3: {
    async up(dataDir) {
      const began = performance.now();
      const port = process.env.S3_PORT ? Number.parseInt(process.env.S3_PORT, 10) : defaultS3Port;
      if (!Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`S3_PORT must be a TCP port; got ${JSON.stringify(process.env.S3_PORT)}`);
      const instance = await startS3(dataDir, { port });
      const seconds = ((performance.now() - began) / 1000).toFixed(1);
      const how = instance.started ? `started (pid ${instance.pid}), answering after ${seconds} s` : `already running (pid ${instance.pid})`;
      return `s3 ${instance.endpoint} ${how}; MinIO ${minioVersion}, access key ${s3Credentials().accessKeyId}`;
    },
    down: stopS3,
  },
  nginx: {
    async up(dataDir) {
      const runDir = join(dataDir, "services", "nginx");
      const options = frontOptions(process.env, runDir);
      const config = renderFrontConfig(options);
      const paths = nginxPaths(runDir);
      const changed = configDiffers(paths.config, config);
      if (changed) {
        mkdirSync(runDir, { recursive: true });
        writeFileSync(paths.config, config);
      }
      const instance = await startNginx(paths.config, runDir);
      const grpc = options.grpc ? `; gRPC on :${options.grpc.listenPort} to ${options.grpc.upstreams.join(",")}` : "";
      const upstreams = `api ${options.apiUpstreams.join(",")}; ws ${options.gatewayUpstreams.join(",")}; healthz ${options.healthUpstream}${grpc}`;
      const listen = `nginx ${instance.version} on ${options.listenHost}:${options.listenPort}`;
      if (instance.started) return `${listen} started (pid ${instance.pid}); ${upstreams}`;
      if (!changed) return `${listen} already running (pid ${instance.pid}); ${upstreams}`;
      await reloadNginx(runDir);
      return `${listen} reloaded (pid ${instance.pid}); ${upstreams}`;
    },
    down: (dataDir) => stopNginx(join(dataDir, "services", "nginx")),
  },
};

function hostPorts(name: string, raw: string): string[] {
  const list = raw.split(",").map((item) => item.trim()).filter((item) => item !== "");
  if (list.length === 0) throw new Error(`${name} must list host:port entries, comma-separated`);
  return list;
}

function frontOptions(env: NodeJS.ProcessEnv, runDir: string) {
  const listen = /^(.+):(\d{1,5})$/.exec(env.NGINX_LISTEN ?? "127.0.0.1:8000");
  if (!listen) throw new Error(`NGINX_LISTEN must be host:port; got ${JSON.stringify(env.NGINX_LISTEN)}`);
  const apiUpstreams = hostPorts("NGINX_API_UPSTREAMS", env.NGINX_API_UPSTREAMS ?? "127.0.0.1:8080");
  const grpcPort = env.NGINX_GRPC_PORT;
  if (grpcPort !== undefined && !/^\d{1,5}$/.test(grpcPort)) throw new Error(`NGINX_GRPC_PORT must be a port number; got ${JSON.stringify(grpcPort)}`);
  if ((grpcPort === undefined) !== (env.NGINX_GRPC_UPSTREAMS === undefined)) throw new Error("NGINX_GRPC_PORT and NGINX_GRPC_UPSTREAMS go together: the gRPC listener needs both");
  return {
    listenHost: listen[1].replace(/^\[|\]$/g, ""),
    listenPort: Number(listen[2]),
    apiUpstreams,
    gatewayUpstreams: env.NGINX_GATEWAY_UPSTREAMS ? hostPorts("NGINX_GATEWAY_UPSTREAMS", env.NGINX_GATEWAY_UPSTREAMS) : apiUpstreams,
    healthUpstream: env.NGINX_HEALTH_UPSTREAM ?? apiUpstreams[0],
    grpc: grpcPort === undefined ? undefined : { listenPort: Number(grpcPort), upstreams: hostPorts("NGINX_GRPC_UPSTREAMS", env.NGINX_GRPC_UPSTREAMS ?? "") },
    runDir,
  };
}

const usage = "usage: npm run services -- up <name>... | down [name...]   (names: cassandra, kafka, redis, s3, nginx)";

function resolveNames(names: string[]): [string, BackingService][] {
  return names.map((name) => {
    if (!Object.hasOwn(services, name)) throw new Error(`unknown service ${JSON.stringify(name)}; ${usage}`);
    return [name, services[name]];
  });
}

async function main(argv: string[]): Promise<void> {
  const [command, ...names] = argv;
  const dataDir = loadConfig(process.env).dataDir;
  if (command === "up") {
    if (names.length === 0) throw new Error(usage);
    for (const [, service] of resolveNames(names)) console.log(await service.up(dataDir));
  } else if (command === "down") {
    // Without names, in the reverse of the order they are listed (the front before what it fronts).
    const chosen = names.length > 0 ? resolveNames(names) : Object.entries(services).reverse();
    for (const [name, service] of chosen) console.log(`${name}: ${(await service.down(dataDir)) ? "stopped" : "was not running"}`);
  } else {
    throw new Error(usage);
  }
}

try {
  await main(process.argv.slice(2));
} catch (error) {
  console.error(`services: ${(error as Error).message}`);
  process.exitCode = 1;
}
