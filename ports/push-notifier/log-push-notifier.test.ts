import { expect } from "chai";
import { loadConfig } from "../../shared/config.js";
import { LogPushNotifier } from "./log-push-notifier.js";
import { openPushNotifier } from "./open-push-notifier.js";
import { describePushNotifierConformance, type DeliveredPush } from "./push-notifier-conformance.js";

/** A delivery as the log driver writes it: `push to user <id> device <id> (<platform>[-sandbox]:<token>…): <json>`. */
function readLogLine(line: string): DeliveredPush {
  const match = /^push to user (\d+) device (\S+) \((apns|fcm)(?:-sandbox)?:[^)]*\): (\{.*\})$/.exec(line);
  if (!match) throw new Error(`not a push line: ${line}`);
  const facts = JSON.parse(match[4]) as { silent: boolean; badge?: number; conversationId?: string; messageId?: string };
  return {
    userId: Number(match[1]),
    deviceId: match[2],
    platform: match[3] === "apns" ? 1 : 2,
    silent: facts.silent,
    ...(facts.badge === undefined ? {} : { badge: facts.badge }),
    ...(facts.conversationId === undefined ? {} : { conversationId: facts.conversationId }),
    ...(facts.messageId === undefined ? {} : { messageId: facts.messageId }),
  };
}

describePushNotifierConformance("log", async () => {
  const lines: string[] = [];
  return { notifier: openPushNotifier(loadConfig({}).push, { info: (line) => lines.push(line), warn: (line) => lines.push(line) }), delivered: async () => lines.map(readLogLine), cleanup: async () => {} };
});

describe("the log push notifier", () => {
  it("logs ids and lengths, never what people wrote to each other, and shortens the token", async () => {
    const lines: string[] = [];
    const message = { conversationId: "5", messageId: "6", senderId: 9, senderNickname: "Grace", preview: "the secret plan" };
    await new LogPushNotifier({ info: (line) => lines.push(line) }).send([{ userId: 7, deviceId: "d", token: "abcdefghijklmnop", platform: 1, isSandbox: true, updatedAt: 1 }], {
      silent: false,
      title: "Grace",
      body: "the secret plan",
      message,
    });
    expect(lines).to.have.length(1);
    expect(lines[0]).to.include("apns-sandbox:abcdefgh…").and.include('"bodyLength":15').and.include('"titleLength":5');
    expect(lines[0]).not.to.include("secret").and.not.to.include("ijklmnop");
  });
});

describe("PUSH_NOTIFIER", () => {
  it("is log unless told, and stops start-up on a driver that does not exist", () => {
    expect(loadConfig({}).push.drivers).to.deep.equal(["log"]);
    expect(loadConfig({ PUSH_NOTIFIER: "log" }).push.drivers).to.deep.equal(["log"]);
    expect(loadConfig({ PUSH_NOTIFIER: " fcm , log", FCM_SERVICE_ACCOUNT_FILE: "/etc/parley/fcm.json" }).push.drivers).to.deep.equal(["log", "fcm"]);
    for (const raw of ["LOG", "log,gcm", "apns;fcm"]) expect(() => loadConfig({ PUSH_NOTIFIER: raw }), raw).to.throw(/PUSH_NOTIFIER must list some of log, apns, fcm/);
  });
});
