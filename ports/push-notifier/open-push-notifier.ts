// Picks the push-notifier driver PUSH_NOTIFIER names (the port is push-notifier.ts). The log driver
// is the only one so far, and the default, so `npm start` needs no provider credentials; provider
// drivers (APNs, FCM) are chosen here once they exist.
import type { PushNotifierKind } from "../../shared/config.js";
import { LogPushNotifier } from "./log-push-notifier.js";
import type { PushNotifier } from "./push-notifier.js";

export function openPushNotifier(kind: PushNotifierKind, log: { info(message: string): void }): PushNotifier {
  switch (kind) {
    case "log":
      return new LogPushNotifier(log);
  }
}
