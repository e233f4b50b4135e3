// The push-notification port: how the platform reaches a device that has no open connection.
// Drivers: ./log-push-notifier.ts (the default: no provider credentials are configured, so each
// notification is written to the log, one line each), ./apns-push-notifier.ts and
// ./fcm-push-notifier.ts (the providers, behind ./provider-push-notifier.ts's queue and retries);
// open-push-notifier.ts picks them as PUSH_NOTIFIER says, and push-notifier-conformance.ts holds
// what every driver must do.
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

/** What became of a send that the caller must act on. */
export interface PushReport {
  /** Tokens the provider called unregistered or invalid: no device will ever get them again. */
  rejected: PushTokenRecord[];
}

export interface PushNotifier {
  /**
   * Sends the notification to each of the given device tokens; resolves once each was delivered
   * to its provider or given up (a failure is counted and logged, never thrown).
   */
  send(tokens: readonly PushTokenRecord[], notification: PushNotification): Promise<PushReport>;
  /** Ends the driver's connections once the sends under way are done. */
  close?(): Promise<void>;
}
