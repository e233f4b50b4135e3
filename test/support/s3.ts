// One real S3 server (MinIO) for the whole test run, started when a test first needs it on its own
// port (so a server `npm run services -- up s3` keeps on 9000 is left alone), and stopped at the
// end of the run if the run started it. Each test works in a bucket of its own, removed after.
import { randomBytes } from "node:crypto";
import {
  AbortMultipartUploadCommand,
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectsCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  S3Client,
} from "@aws-sdk/client-s3";
import { ensureS3 } from "../../scripts/services/s3.js";
import { testServicesDir } from "./cassandra.js";

export const testS3Port = 9010;

export interface TestS3 {
  endpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
}

let running: ReturnType<typeof ensureS3> | undefined;

export async function testS3(): Promise<TestS3> {
  running ??= ensureS3(testServicesDir, { port: testS3Port });
  const { endpoint, region, credentials } = await running;
  return { endpoint, region, ...credentials };
}

/** Buckets of test servers (one per data directory, which restarts of its server share). */
const serverBuckets = new Map<string, Promise<{ bucket: string; remove: () => Promise<void> }>>();

/** The bucket of the test server on `dataDir`, created on first use and removed at the end of the run. */
export async function testBucketFor(dataDir: string): Promise<string> {
  let bucket = serverBuckets.get(dataDir);
  if (!bucket) serverBuckets.set(dataDir, (bucket = createTestBucket()));
  return (await bucket).bucket;
}

/** Removes the servers' buckets, then stops the test S3 server if this run started it. */
export async function releaseTestS3(): Promise<void> {
  const buckets = [...serverBuckets.values()];
  serverBuckets.clear();
  await Promise.allSettled(buckets.map(async (bucket) => (await bucket).remove()));
  const instance = running;
  running = undefined;
  if (instance) await (await instance).stop();
}

// In a mocha run the end of the run stops what the run started. Registered here, by the module the
// tests themselves load: mocha loads test files through require, so a module imported by the
// runner script would be a second instance that never saw the server start.
if (typeof after === "function") after(releaseTestS3);

/** A client of the test server with its own credentials (or the ones given, to test refusals). */
export async function testS3Client(credentials?: { accessKeyId: string; secretAccessKey: string }): Promise<S3Client> {
  const s3 = await testS3();
  return new S3Client({ endpoint: s3.endpoint, region: s3.region, forcePathStyle: true, credentials: credentials ?? { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } });
}

/** A new empty bucket for one test; `remove` empties and deletes it (staged parts and unfinished multipart uploads included). */
export async function createTestBucket(): Promise<{ bucket: string; remove: () => Promise<void> }> {
  const client = await testS3Client();
  const bucket = `parley-test-${randomBytes(6).toString("hex")}`;
  await client.send(new CreateBucketCommand({ Bucket: bucket }));
  return {
    bucket,
    async remove() {
      try {
        await emptyBucket(client, bucket);
        await client.send(new DeleteBucketCommand({ Bucket: bucket }));
      } finally {
        client.destroy();
      }
    },
  };
}

async function emptyBucket(client: S3Client, bucket: string): Promise<void> {
  for (;;) {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket }));
    const keys = (page.Contents ?? []).map((object) => ({ Key: object.Key! }));
    if (keys.length === 0) break;
    await client.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys, Quiet: true } }));
  }
  const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  for (const upload of uploads.Uploads ?? []) {
    await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: upload.Key!, UploadId: upload.UploadId! }));
  }
}
