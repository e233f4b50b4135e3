import { expect } from "chai";
import { meshMaxPacketBytes, transporterOf } from "../moleculer.config.js";
import { clusterConfig } from "./config.js";

describe("cluster settings (ROLES, NODE_ID, TRANSPORTER, REDIS_URL, KAFKA_BROKERS, BLOB_STORE, S3_*)", () => {
  const refusal = (env: NodeJS.ProcessEnv) => {
    try {
      clusterConfig(env);
    } catch (err) {
      return (err as Error).message;
    }
    return undefined;
  };

  it("defaults to every role in one process, named embedded, on memory, disk and no transporter", () => {
    expect(clusterConfig({})).to.deep.equal({
      roles: ["api", "engine", "gateway", "webhooks"],
      nodeId: "embedded",
      transporter: undefined,
      redisUrl: undefined,
      redisPrefix: "parley:",
      kafkaBrokers: undefined,
      kafkaTopicPrefix: "parley.",
      blobs: { kind: "disk" },
    });
  });

  it("reads a process of a cluster: its roles in a fixed order, its name, the transporter and the shared services", () => {
    const config = clusterConfig({
      ROLES: "webhooks, engine",
      NODE_ID: "engine-1",
      TRANSPORTER: "tcp://127.0.0.1:19001/engine-1,127.0.0.1:19002/api-1",
      REDIS_URL: "redis://127.0.0.1:6379",
      KAFKA_BROKERS: "127.0.0.1:9092, kafka-2:9092",
      BLOB_STORE: "s3",
      S3_ENDPOINT: "http://127.0.0.1:9000",
      S3_BUCKET: "parley-media",
      S3_ACCESS_KEY_ID: "parley",
      S3_SECRET_ACCESS_KEY: "parley-secret",
    });
    expect(config).to.deep.include({ roles: ["engine", "webhooks"], nodeId: "engine-1", kafkaBrokers: ["127.0.0.1:9092", "kafka-2:9092"], redisUrl: "redis://127.0.0.1:6379" });
    expect(config.blobs).to.deep.equal({ kind: "s3", endpoint: "http://127.0.0.1:9000", region: "us-east-1", bucket: "parley-media", accessKeyId: "parley", secretAccessKey: "parley-secret", forcePathStyle: true });
    // A named process of a cluster without NODE_ID gets a name of its own.
    expect(clusterConfig({ ROLES: "api", TRANSPORTER: "nats://n:4222" }).nodeId).to.match(/^.+-\d+$/);
  });

  it("refuses what cannot work, saying why", () => {
    expect(refusal({ ROLES: "api,cache" })).to.match(/ROLES must list some of api, engine, gateway, webhooks/);
    expect(refusal({ ROLES: "api" })).to.match(/ROLES=api needs TRANSPORTER/);
    expect(refusal({ NODE_ID: "engine 1" })).to.match(/NODE_ID must be/);
    expect(refusal({ REDIS_URL: "127.0.0.1:6379" })).to.match(/REDIS_URL must start with redis:\/\//);
    expect(refusal({ KAFKA_BROKERS: "127.0.0.1" })).to.match(/KAFKA_BROKERS: "127.0.0.1" is not host:port/);
    expect(refusal({ BLOB_STORE: "ftp" })).to.match(/BLOB_STORE must be one of disk, s3/);
    expect(refusal({ BLOB_STORE: "s3" })).to.match(/BLOB_STORE=s3 needs S3_BUCKET/);
    expect(refusal({ BLOB_STORE: "s3", S3_BUCKET: "Media" })).to.match(/S3_BUCKET/);
    expect(refusal({ BLOB_STORE: "s3", S3_BUCKET: "media", S3_ENDPOINT: "127.0.0.1:9000" })).to.match(/S3_ENDPOINT must be an http\(s\) base URL/);
    expect(refusal({ REDIS_PREFIX: "a prefix" })).to.match(/REDIS_PREFIX/);
  });

  it("turns a tcp:// node list into a static TCP mesh listening on this node's own entry, without UDP discovery", () => {
    const list = "tcp://127.0.0.1:19001/engine-1,127.0.0.1:19002/api-1";
    expect(transporterOf(list, "api-1")).to.deep.equal({ type: "TCP", options: { udpDiscovery: false, port: 19002, urls: ["127.0.0.1:19001/engine-1", "127.0.0.1:19002/api-1"], maxPacketSize: meshMaxPacketBytes, gossipPeriod: 1 } });
    expect(() => transporterOf(list, "gateway-1")).to.throw(/no host:port\/gateway-1 entry/);
    expect(transporterOf("redis://127.0.0.1:6379", "api-1")).to.equal("redis://127.0.0.1:6379");
    expect(transporterOf(undefined, "embedded")).to.equal(undefined);
  });
});
