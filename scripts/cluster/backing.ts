// The backing services of the local cluster and what they need before the first Parley process
// starts: the keyspace at this build's schema (one migration, not one per engine racing for the
// lock), the media bucket, and the update log's topics.
import { CreateBucketCommand, HeadBucketCommand, S3Client } from "@aws-sdk/client-s3";
import { KafkaUpdateLog } from "../../ports/update-log/kafka-update-log.js";
import { openCassandraStore } from "../../ports/store/cassandra/cassandra-store.js";
import { WebhookTopic, webhookTopicName } from "../../webhooks/fleet.js";
import { cassandraPort } from "../services/cassandra.js";
import { kafkaPort } from "../services/kafka.js";
import { defaultRedisPort } from "../services/redis.js";
import { defaultS3Port } from "../services/s3.js";
import type { ClusterLayout } from "./layout.js";

/** In start order; each on its usual local port. */
export const backingServices = [
  { name: "cassandra", port: cassandraPort },
  { name: "kafka", port: kafkaPort },
  { name: "redis", port: defaultRedisPort },
  { name: "s3", port: defaultS3Port },
] as const;

export async function prepareBackingServices(layout: ClusterLayout, kafkaTopicPrefix: string): Promise<void> {
  const store = await openCassandraStore({ contactPoints: [layout.cassandra.contactPoint], keyspace: layout.cassandra.keyspace, migrate: true });
  await store.close();

  const s3 = new S3Client({
    endpoint: layout.s3.endpoint,
    region: layout.s3.region,
    forcePathStyle: true,
    credentials: { accessKeyId: layout.s3.accessKeyId, secretAccessKey: layout.s3.secretAccessKey },
  });
  try {
    await s3.send(new HeadBucketCommand({ Bucket: layout.s3.bucket }));
  } catch {
    await s3.send(new CreateBucketCommand({ Bucket: layout.s3.bucket }));
  } finally {
    s3.destroy();
  }

  const log = new KafkaUpdateLog({ bootstrap: [layout.kafkaBrokers], clientId: "parley-cluster-launcher" });
  try {
    await log.ensureTopic(webhookTopicName(kafkaTopicPrefix), WebhookTopic.partitions);
  } finally {
    await log.close();
  }
}
