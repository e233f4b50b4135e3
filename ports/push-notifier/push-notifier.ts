// The push-notification port: how the platform reaches a device that has no open connection.
// Drivers: ./log-push-notifier.ts (the default: no provider credentials are configured, so each
// notification is written to the log, one line each); open-push-notifier.ts picks the driver
// PUSH_NOTIFIER names, and push-notifier-conformance.ts holds what every driver must do.
import type { PushTokenRecord } from "../store/store.js";

/** What a new-message alert carries for the app to open the right conversation. */
export interface NewMessageAlert {
  /** Decimal string: provider data payloads (APNs custom keys, FCM data) carry strings. */
  conversationId: string;
  /** Decimal string, as conversationId. */
  messageId: string;
  senderId: number;
  senderNickname: string;
  /** At most 100 characters of what the message says; "[image]" and the like for media. */
  preview: string;
}

export interface PushNotification {
  /** Badge count to show; 0 clears it. */
  badge?: number;
  /** A silent (content-available) push wakes the app without alerting the user. */
  silent: boolean;
  /** The alert's title as the device shows it. */
  title?: string;
  /** The alert's text as the device shows it. */
  body?: string;
  /** Present when the notification announces a new message. */
  message?: NewMessageAlert;
}

export interface PushNotifier {
  /** Sends the notification to each of the given device tokens. */
  send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<void>;
}
