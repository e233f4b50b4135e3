// The push-notification port: how the platform reaches a device that has no open connection.
// Drivers: ./log-push-notifier.ts (embedded default: no provider credentials are configured, so
// each notification is written to the log, one line each). APNs and FCM drivers plug in here.
import type { PushTokenRecord } from "../store/store.js";

export interface PushNotification {
  /** Badge count to show; 0 clears it. */
  badge?: number;
  /** A silent (content-available) push wakes the app without alerting the user. */
  silent: boolean;
  title?: string;
  body?: string;
}

export interface PushNotifier {
  /** Sends the notification to each of the given device tokens. */
  send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<void>;
}
