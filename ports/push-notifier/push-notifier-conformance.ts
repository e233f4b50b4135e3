// The promises of the push-notifier port (push-notifier.ts), as one mocha suite every driver must
// pass: each is read back through its own medium (the log for the log driver; a provider's test
// server for a provider driver), as the deliveries the devices would get.
import { expect } from "chai";
import type { PushTokenRecord } from "../store/store.js";
import type { PushNotifier } from "./push-notifier.js";

/** One notification as it reached one device, read back from the driver's medium. */
export interface DeliveredPush {
  userId: number;
  deviceId: string;
  /** 1 APNs, 2 FCM, as the token's record says. */
  platform: number;
  silent: boolean;
  badge?: number;
  conversationId?: string;
  messageId?: string;
}

export interface PushNotifierUnderTest {
  notifier: PushNotifier;
  /** What reached the devices so far, in the order it arrived. */
  delivered(): Promise<DeliveredPush[]>;
  cleanup(): Promise<void>;
}

/** A device token that says whose it is, in hex as APNs device tokens are: `conformanceTokenOwner` reads it back. */
const token = (userId: number, deviceId: string, platform: number): PushTokenRecord => ({
  userId,
  deviceId,
  token: Buffer.from(`${userId}/${deviceId}`).toString("hex"),
  platform,
  isSandbox: false,
  updatedAt: 1,
});

/** The user and device a conformance token was made for. */
export function conformanceTokenOwner(token: string): { userId: number; deviceId: string } {
  const [userId, deviceId] = Buffer.from(token, "hex").toString("utf8").split("/");
  return { userId: Number(userId), deviceId };
}

export function describePushNotifierConformance(name: string, open: () => Promise<PushNotifierUnderTest>): void {
  describe(`push notifier conformance: ${name}`, () => {
    let subject: PushNotifierUnderTest;
    beforeEach(async () => {
      subject = await open();
    });
    afterEach(async () => subject.cleanup());

    it("sends one notification to each device it is given, each once, on the token's platform", async () => {
      await subject.notifier.send([token(7, "phone", 1), token(7, "tablet", 2), token(8, "phone", 2)], { silent: false, badge: 3, title: "Ada", body: "hello" });
      const delivered = await subject.delivered();
      expect(delivered.map(({ userId, deviceId, platform }) => `${userId}/${deviceId}/${platform}`).sort()).to.deep.equal(["7/phone/1", "7/tablet/2", "8/phone/2"]);
      expect(delivered.every((push) => !push.silent && push.badge === 3)).to.equal(true);
    });

    it("carries a new message's conversation and message ids, so the app opens the right conversation", async () => {
      const message = { conversationId: "18446744073709551615", messageId: "42", senderId: 9, senderNickname: "Grace", preview: "see you at nine" };
      await subject.notifier.send([token(7, "phone", 2)], { silent: false, badge: 1, title: "Grace", body: "see you at nine", message });
      const [push, ...more] = await subject.delivered();
      expect(more).to.deep.equal([]);
      expect(push).to.include({ userId: 7, deviceId: "phone", conversationId: "18446744073709551615", messageId: "42" });
    });

    it("sends a silent push with its badge, such as ClearBadge's badge 0", async () => {
      await subject.notifier.send([token(7, "phone", 1)], { silent: true, badge: 0 });
      const [push, ...more] = await subject.delivered();
      expect(more).to.deep.equal([]);
      expect(push).to.include({ silent: true, badge: 0 });
    });

    it("sends nothing when given no device", async () => {
      await subject.notifier.send([], { silent: false, badge: 1, title: "t", body: "b" });
      expect(await subject.delivered()).to.deep.equal([]);
    });
  });
}
