// Builds the push notifier PUSH_NOTIFIER names (the port is push-notifier.ts): the log driver alone
// by default, so `npm start` needs no provider credentials; with apns and/or fcm, their drivers
// behind one queue each. Credentials are read and checked here, at start-up.
import type { PushConfig } from "../../shared/config.js";
import { ApnsDriver } from "./apns-push-notifier.js";
import { FcmDriver } from "./fcm-push-notifier.js";
import { LogPushNotifier } from "./log-push-notifier.js";
import { ProviderPushNotifier, ProviderQueue, type ProviderDriver } from "./provider-push-notifier.js";
import type { PushNotifier } from "./push-notifier.js";

export function openPushNotifier(config: PushConfig, log: { info(message: string): void; warn(message: string): void }): PushNotifier {
  const logDriver = config.drivers.includes("log") ? new LogPushNotifier(log) : undefined;
  const connections = { perHost: config.connectionsPerHost, requestTimeoutMs: config.requestTimeoutMs, ttlSeconds: config.ttlSeconds };
  const drivers: ProviderDriver[] = [];
  if (config.apns) drivers.push(new ApnsDriver(config.apns, connections));
  if (config.fcm) drivers.push(new FcmDriver(config.fcm, connections));
  if (drivers.length === 0) return logDriver ?? new ProviderPushNotifier([], undefined);
  const policy = { concurrency: config.concurrency, queueLimit: config.queueLimit, retryWindowMs: config.retryWindowMs };
  return new ProviderPushNotifier(
    drivers.map((driver) => new ProviderQueue(driver, policy, log)),
    logDriver,
  );
}
