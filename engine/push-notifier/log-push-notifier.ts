import type { PushTokenRecord } from "../store/store.js";
import type { PushNotification, PushNotifier } from "./push-notifier.js";

const platformNames: Record<number, string> = { 1: "apns", 2: "fcm" };

/** Writes one log line per device instead of calling a provider; tokens are shortened. */
export class LogPushNotifier implements PushNotifier {
  constructor(private readonly log: { info(message: string): void }) {}

  async send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<void> {
    for (const token of tokens) {
      const target = `${platformNames[token.platform] ?? "unknown"}${token.isSandbox ? "-sandbox" : ""}:${token.token.slice(0, 8)}…`;
      this.log.info(`push to user ${token.userId} device ${token.deviceId} (${target}): ${JSON.stringify(notification)}`);
    }
  }
}
