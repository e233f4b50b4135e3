// @parley/sdk: typed clients for every Parley service with token refresh, the WebSocket update
// stream with heartbeat, reconnection and gap recovery, and an agent kit (webhook verification,
// streamed messages, card actions). Protocol types are re-exported from the generated code.
export { createParleyClient, parleyServices, type ParleyClient, type ParleyClientOptions, type ParleyServiceClients, type ParleyServices } from "./client.js";
export { TokenSession, type RefreshedTokens, type SessionTokens, type TokenSessionOptions } from "./session.js";
export { ErrorCodes, GatewayError, SessionEndedError, errorDetailOf, isAccessTokenRejected } from "./errors.js";
export { Errors as errorCatalogue, catalogueEntryByName, type CatalogueEntry, type ErrorName } from "../../shared/error-catalogue.js";
export { backoffDelay, defaultBackoff, type BackoffPolicy } from "./backoff.js";
export { defaultRetry, retryDelayOf, retryInterceptor, type RetryPolicy } from "./retry.js";
export { UpdateSequencer, snVerdict, type DifferencePage, type Related, type SequencerOptions, type SnVerdict, type UpdateHandlers } from "./update-sequencer.js";
export { UpdateStream, type UpdateStreamEnd, type UpdateStreamOptions, type UpdateStreamState } from "./update-stream.js";
export {
  checkWebhookSignature,
  createWebhookHandler,
  signWebhook,
  verifySignature,
  verifyWebhook,
  webhookHeaderSets,
  webhookMaxAgeSeconds,
  webhookSignatureOf,
  type HeaderSource,
  type SignatureCheckOptions,
  type WebhookHandler,
  type WebhookHandlerOptions,
  type WebhookRejection,
  type WebhookSignature,
  type WebhookVerification,
} from "./webhook.js";
export { StreamAbortedError, streamMessage, type StreamMessageOptions, type StreamTarget, type StreamedMessage } from "./stream-message.js";
export { CardActions, type CardActionHandler, type CardActionReply, type CardActionsOptions } from "./card-actions.js";
export { nextClientMessageId } from "./client-message-id.js";
export * from "./protocol.js";
