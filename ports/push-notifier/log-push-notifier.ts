import type { PushTokenRecord } from "../store/store.js";
import type { PushNotification, PushNotifier, PushReport } from "./push-notifier.js";

const platformNames: Record<number, string> = { 1: "apns", 2: "fcm" };

/**
 * What the log may show of a notification: message text (title, body, preview) is what people
 * wrote to each other, so only its length is logged; ids are enough to follow a delivery.
 */
function loggable(notification: PushNotification): Record<string, unknown> {
  const { title, body, message, ...rest } = notification;
  return {
    ...rest,
    ...(title === undefined ? {} : { titleLength: title.length }),
    ...(body === undefined ? {} : { bodyLength: body.length }),
    ...(message ? { conversationId: message.conversationId, messageId: message.messageId, senderId: message.senderId } : {}),
  };
}

/** Writes one log line per device instead of calling a provider; tokens are shortened. */
export class LogPushNotifier implements PushNotifier {
  constructor(private readonly log: { info(message: string): void }) {}

  async send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<PushReport> {
    const shown = JSON.stringify(loggable(notification));
    for (const token of tokens) {
      const target = `${platformNames[token.platform] ?? "unknown"}${token.isSandbox ? "-sandbox" : ""}:${token.token.slice(0, 8)}…`;
      this.log.info(`push to user ${token.userId} device ${token.deviceId} (${target}): ${shown}`);
    }
    return { rejected: [] };
  }
}
