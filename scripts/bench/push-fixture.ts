// What the push row needs besides the common fixture: Apple's and Google's push services, as the
// test suite's local stand-ins (test/support/fake-push-providers.ts) running in the benchmark's
// own process, and offline recipients of the sender's messages, half of them with a device token.
// The stand-ins check every request as the real providers would (signed provider tokens, OAuth,
// payloads), so an accepted notification is one the real service would have taken.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { PushService } from "../../shared/gen/api/v1/push_pb.js";
import { PushPlatform } from "../../shared/gen/shared/v1/common_pb.js";
import { signInWithCode, type SignedIn } from "../../test/support/accounts.js";
import { startPushProviders } from "../../test/support/fake-push-providers.js";
import { client } from "../../test/support/harness.js";
import { befriend } from "../../test/support/social.js";
import { inBatches } from "./fixture.js";
import { root } from "./processes.js";

export interface LocalPushProviders {
  /**
   * The settings that point a server at these providers, NODE_EXTRA_CA_CERTS included: node reads
   * that only when a process starts, so the providers exist before the server does.
   */
  serverEnv: Record<string, string>;
  /** Notifications the providers answered 200, arrived at Date.now() in [fromMs, untilMs). */
  acceptedBetween(fromMs: number, untilMs: number): number;
  /** Notifications answered 200 since the last forget(). */
  accepted(): number;
  /** Drops the arrivals recorded so far: the stand-ins keep every request, a whole run's would pile up. */
  forget(): void;
  close(): Promise<void>;
}

const topic = "io.parley.bench";

/** Starts a local APNs and FCM with a throwaway CA and credentials, all in one directory that close() removes. */
export async function startLocalPushProviders(): Promise<LocalPushProviders> {
  const dir = execFileSync("bash", [join(root, "scripts/test-tls.sh")], { encoding: "utf8" }).trim();
  const started: { close(): Promise<void> }[] = [];
  const close = async () => {
    await Promise.all(started.splice(0).map((provider) => provider.close()));
    rmSync(dir, { recursive: true, force: true });
  };
  // The stand-ins find their certificate through the test suite's variable, read as each starts.
  const previousTlsDir = process.env.PARLEY_TEST_TLS_DIR;
  process.env.PARLEY_TEST_TLS_DIR = dir;
  try {
    const providers = await startPushProviders(dir, topic);
    started.push(providers);
    const { production, sandbox, fcm } = providers;
    const all = [production, sandbox, fcm];
    const arrivals = (): { at: number }[] => all.flatMap((provider): { at: number }[] => provider.accepted);
    return {
      serverEnv: { ...providers.env, NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") },
      acceptedBetween: (fromMs, untilMs) => arrivals().filter((arrival) => arrival.at >= fromMs && arrival.at < untilMs).length,
      accepted: () => arrivals().length,
      forget: () => {
        for (const provider of all) provider.received.splice(0);
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  } finally {
    if (previousTlsDir === undefined) delete process.env.PARLEY_TEST_TLS_DIR;
    else process.env.PARLEY_TEST_TLS_DIR = previousTlsDir;
  }
}

export interface PushFixture {
  /** Private conversations of the sender with recipients who registered one device token each, APNs and FCM in turn. */
  withToken: bigint[];
  /** Private conversations of the sender with recipients who registered none: the same message, nothing to notify. */
  tokenless: bigint[];
}

/**
 * `recipients` users with a token and as many without, each signed in on one device with no
 * socket (so offline) and befriended with `sender`.
 */
export async function buildPushFixture(server: { url: string; codesFile: string }, sender: SignedIn, recipients: number): Promise<PushFixture> {
  const befriended = (users: SignedIn[]) => inBatches(users.length, 8, (k) => befriend(server, sender, users[k], "binary"));
  const holders = await inBatches(recipients, 8, () => signInWithCode(server, "binary"));
  await inBatches(recipients, 8, (k) => {
    const apns = k % 2 === 0;
    return client(server, PushService, "binary", holders[k].accessToken).registerToken({
      deviceId: holders[k].deviceId,
      // APNs device tokens are 32 bytes in hex; FCM registration tokens are opaque printable text.
      token: apns ? randomBytes(32).toString("hex") : `bench-${randomBytes(24).toString("base64url")}`,
      platform: apns ? PushPlatform.APNS : PushPlatform.FCM,
      isSandbox: false,
    });
  });
  const withoutToken = await inBatches(recipients, 8, () => signInWithCode(server, "binary"));
  return { withToken: await befriended(holders), tokenless: await befriended(withoutToken) };
}
