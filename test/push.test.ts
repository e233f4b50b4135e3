import { expect } from "chai";
import { PushPlatform } from "../shared/gen/shared/v1/common_pb.js";
import { PushService } from "../shared/gen/api/v1/push_pb.js";
import { Errors } from "../shared/errors.js";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import type { PushNotification, PushNotifier } from "../ports/push-notifier/push-notifier.js";
import type { PushTokenRecord, Store } from "../ports/store/store.js";
import { device, signInAnotherDevice, signInWithCode } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, openServerStore, freshEmail, lastCode, startTestServer, wireModes, type TestServer } from "./support/harness.js";

for (const mode of wireModes) {
  describe(`PushService (${mode})`, () => {
    let server: TestServer;
    let store: Store;
    const sent: { tokens: readonly PushTokenRecord[]; notification: PushNotification }[] = [];
    const recordingNotifier: PushNotifier = {
      async send(tokens, notification) {
        sent.push({ tokens, notification });
        return { rejected: [] };
      },
    };
    before(async () => {
      server = await startTestServer({ adapters: { pushNotifier: recordingNotifier } });
      store = await openServerStore(server);
    });
    after(async () => {
      await store.close();
      await server.dispose();
    });
    const storedTokens = (userId: number) => store.pushTokens.listPushTokens(userId);

    it("RegisterToken stores and replaces the device's token; UnregisterToken deletes it once", async () => {
      const user = await signInWithCode(server, mode);
      const push = client(server, PushService, mode, user.accessToken);
      await push.registerToken({ deviceId: user.deviceId, token: "apns-token-1", platform: PushPlatform.APNS, isSandbox: true });
      await push.registerToken({ deviceId: user.deviceId, token: "apns-token-2", platform: PushPlatform.APNS, isSandbox: false });
      const stored = await storedTokens(user.userId);
      expect(stored).to.have.length(1);
      expect(stored[0]).to.include({ deviceId: user.deviceId, token: "apns-token-2", platform: PushPlatform.APNS, isSandbox: false });
      await push.unregisterToken({ deviceId: user.deviceId });
      await expectError(push.unregisterToken({ deviceId: user.deviceId }), Errors.pushTokenNotFound);
    });

    it("RegisterToken answers INVALID_ARGUMENT for an empty token, an unspecified platform, or a device that is not signed in", async () => {
      const user = await signInWithCode(server, mode);
      const push = client(server, PushService, mode, user.accessToken);
      await expectError(push.registerToken({ deviceId: user.deviceId, token: "", platform: PushPlatform.FCM }), Errors.invalidArgument);
      await expectError(push.registerToken({ deviceId: user.deviceId, token: "t", platform: PushPlatform.UNSPECIFIED }), Errors.invalidArgument);
      await expectError(push.registerToken({ deviceId: user.deviceId, token: "t", platform: 7 as PushPlatform }), Errors.invalidArgument);
      await expectError(push.registerToken({ deviceId: "not-my-device", token: "t", platform: PushPlatform.FCM }), Errors.unknownPushDevice);
    });

    it("stores the push token given at sign-in, and Logout removes it with the session", async () => {
      const email = freshEmail();
      const auth = client(server, AuthService, mode);
      const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
      const signed = await auth.verifyCode({
        verifyToken,
        code: lastCode(server, email),
        deviceInfo: device("phone-1", { pushToken: { $typeName: "shared.v1.PushTokenInfo", token: "fcm-at-login", platform: PushPlatform.FCM, isSandbox: false } }),
      });
      expect((await storedTokens(signed.userId)).map((t) => t.token)).to.deep.equal(["fcm-at-login"]);
      await client(server, AuthService, mode, signed.accessToken).logout({});
      expect(await storedTokens(signed.userId)).to.deep.equal([]);
    });

    it("ClearBadge sends a silent badge-0 push to the caller's APNs devices only", async () => {
      const user = await signInWithCode(server, mode);
      const other = await signInAnotherDevice(server, user.email);
      await client(server, PushService, mode, user.accessToken).registerToken({ deviceId: user.deviceId, token: "apns-x", platform: PushPlatform.APNS });
      await client(server, PushService, mode, other.accessToken).registerToken({ deviceId: other.deviceId, token: "fcm-y", platform: PushPlatform.FCM });
      sent.length = 0;
      await client(server, PushService, mode, user.accessToken).clearBadge({});
      expect(sent).to.have.length(1);
      expect(sent[0].tokens.map((t) => t.token)).to.deep.equal(["apns-x"]);
      expect(sent[0].notification).to.deep.equal({ badge: 0, silent: true });
    });

    it("all three answer UNAUTHENTICATED without a valid token", async () => {
      const push = client(server, PushService, mode, "nxs_bad");
      await expectError(push.registerToken({ deviceId: "d", token: "t", platform: PushPlatform.FCM }), Errors.unauthenticated);
      await expectError(push.unregisterToken({ deviceId: "d" }), Errors.unauthenticated);
      await expectError(push.clearBadge({}), Errors.unauthenticated);
    });
  });
}
