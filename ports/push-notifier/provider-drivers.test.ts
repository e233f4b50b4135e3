// The APNs and FCM drivers, behind their queues, pass the push-notifier port's conformance suite,
// read back from local servers that hold them to the providers' contracts; and the provider tokens
// they sign are renewed when Apple and Google want them renewed, not on every request.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { loadConfig } from "../../shared/config.js";
import {
  generateServiceAccountKeys,
  makeApnsCredentials,
  makeFcmServiceAccount,
  startFakeFcm,
  startPushProviders,
  type ApnsArrival,
  type FcmArrival,
} from "../../test/support/fake-push-providers.js";
import { ApnsProviderToken, apnsTokenRenewalMs, loadApnsKey } from "./apns-push-notifier.js";
import { GoogleAccessToken, loadServiceAccount } from "./fcm-push-notifier.js";
import { openPushNotifier } from "./open-push-notifier.js";
import { conformanceTokenOwner, describePushNotifierConformance, type DeliveredPush } from "./push-notifier-conformance.js";

const topic = "io.parley.conformance";

function fromApns(arrival: ApnsArrival): DeliveredPush {
  const payload = arrival.payload as { aps: { alert?: unknown; badge?: number }; conversationId?: string; messageId?: string };
  return {
    ...conformanceTokenOwner(arrival.deviceToken),
    platform: 1,
    silent: payload.aps.alert === undefined,
    ...(payload.aps.badge === undefined ? {} : { badge: payload.aps.badge }),
    ...(payload.conversationId === undefined ? {} : { conversationId: payload.conversationId }),
    ...(payload.messageId === undefined ? {} : { messageId: payload.messageId }),
  };
}

function fromFcm(arrival: FcmArrival): DeliveredPush {
  const message = arrival.message as { notification?: unknown; data?: Record<string, string> };
  const data = message.data ?? {};
  return {
    ...conformanceTokenOwner(arrival.token!),
    platform: 2,
    silent: message.notification === undefined,
    ...(data.badge === undefined ? {} : { badge: Number(data.badge) }),
    ...(data.conversationId === undefined ? {} : { conversationId: data.conversationId }),
    ...(data.messageId === undefined ? {} : { messageId: data.messageId }),
  };
}

describePushNotifierConformance("apns and fcm", async () => {
  const dir = mkdtempSync(join(tmpdir(), "parley-push-conformance-"));
  const providers = await startPushProviders(dir, topic);
  const { production, fcm } = providers;
  const notifier = openPushNotifier(loadConfig(providers.env).push, { info: () => undefined, warn: () => undefined });
  return {
    notifier,
    // A send resolves once each provider answered, so what arrived is all there is.
    delivered: async () => [...production.accepted.map(fromApns), ...fcm.accepted.map(fromFcm)],
    cleanup: async () => {
      await notifier.close?.();
      await providers.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe("provider tokens", () => {
  let dir: string;
  before(() => (dir = mkdtempSync(join(tmpdir(), "parley-provider-tokens-"))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("signs one APNs provider token and reuses it until 50 minutes, then signs a new one", async () => {
    const credentials = makeApnsCredentials(dir);
    let now = 1_800_000_000_000;
    const tokens = new ApnsProviderToken(loadApnsKey({ key: { file: credentials.keyFile }, keyId: credentials.keyId, teamId: credentials.teamId, topic, productionUrl: "", sandboxUrl: "" }), credentials.keyId, credentials.teamId, () => now);
    const first = await tokens.jwt();
    expect(decodeProtectedHeader(first)).to.deep.equal({ alg: "ES256", kid: credentials.keyId });
    expect(decodeJwt(first)).to.deep.equal({ iss: credentials.teamId, iat: now / 1000 });
    now += apnsTokenRenewalMs - 1;
    expect(await tokens.jwt()).to.equal(first);
    now += 1;
    const second = await tokens.jwt();
    expect(second).not.to.equal(first);
    expect(decodeJwt(second).iat).to.equal(now / 1000);
    // Apple refuses renewals more often than every 20 minutes: an ExpiredProviderToken that soon is not answered with a new token.
    now += 19 * 60_000;
    expect(tokens.renewAfterExpiry()).to.equal(false);
    expect(await tokens.jwt()).to.equal(second);
    now += 60_000;
    expect(tokens.renewAfterExpiry()).to.equal(true);
    expect(await tokens.jwt()).not.to.equal(second);
  });

  it("trades one assertion for an FCM access token and reuses it until five minutes before it expires", async () => {
    const keys = generateServiceAccountKeys();
    const fcm = await startFakeFcm({ ...keys, accessTokenTtlSeconds: 3600 });
    try {
      const { file } = makeFcmServiceAccount(dir, fcm.tokenUri, keys);
      const account = loadServiceAccount({ serviceAccount: { file }, projectId: undefined, url: fcm.url });
      let now = Date.now();
      const tokens = new GoogleAccessToken(account, 5000, () => now);
      const [a, b] = await Promise.all([tokens.token(), tokens.token()]);
      expect(a).to.equal(b);
      expect(fcm.tokenRequests).to.equal(1);
      now += 54 * 60_000;
      expect(await tokens.token()).to.equal(a);
      now += 60_000 + 1;
      expect(await tokens.token()).not.to.equal(a);
      expect(fcm.tokenRequests).to.equal(2);
    } finally {
      await fcm.close();
    }
  });
});
