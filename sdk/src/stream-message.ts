// Sends text as it is produced (a language model's tokens, say) as one streamed message: a STREAM
// message in phase START, a delta per chunk, then END with the whole text. When the source fails
// the message ends in phase ERROR instead, and keeps the text streamed so far (the server
// accumulates the deltas), so the reader sees what was said and that it was cut short.
import type { Client } from "@connectrpc/connect";
import type { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import { MessageType, StreamPhase } from "../../shared/gen/shared/v1/message_pb.js";
import { nextClientMessageId } from "./client-message-id.js";

export interface StreamTarget {
  conversationId: bigint;
  /** The message this one answers. */
  replyToMessageId?: bigint;
  /** MIME type of the text, e.g. text/markdown (default text/plain). */
  contentType?: string;
  /** Idempotency id of the START message (a fresh one by default). */
  clientMessageId?: bigint;
}

export interface StreamMessageOptions {
  /** What the reader is told when the source fails (1..1000 characters); a fixed sentence by default, so no internal error text leaks to users. */
  errorMessage?: (cause: unknown) => string;
}

export interface StreamedMessage {
  messageId: bigint;
  /** Every chunk, joined: the message's final text. */
  text: string;
}

/** The source of a streamed message failed; the message was ended in phase ERROR. */
export class StreamAbortedError extends Error {
  constructor(
    readonly messageId: bigint,
    /** The text streamed before the failure: what the message keeps. */
    readonly partialText: string,
    options: { cause: unknown },
  ) {
    super(`streaming message ${messageId} failed after ${partialText.length} characters`, options);
    this.name = "StreamAbortedError";
  }
}

const defaultErrorMessage = "The answer could not be completed.";

/**
 * Streams `chunks` into a new message of the conversation (an agent's token is required).
 * Resolves with the message id and text once END is stored; rejects with StreamAbortedError when
 * the source (or a delta) failed after START, after ending the message in phase ERROR.
 */
export async function streamMessage(
  messages: Client<typeof MessageService>,
  target: StreamTarget,
  chunks: AsyncIterable<string> | Iterable<string>,
  options: StreamMessageOptions = {},
): Promise<StreamedMessage> {
  const { messageId } = await messages.sendMessage({
    clientMessageId: target.clientMessageId ?? nextClientMessageId(),
    conversationId: target.conversationId,
    body: { type: MessageType.STREAM, content: { case: "stream", value: { phase: StreamPhase.START, contentType: target.contentType ?? "text/plain" } } },
    replyToMessageId: target.replyToMessageId,
  });
  const { conversationId } = target;
  let text = "";
  let seq = 0;
  try {
    for await (const chunk of chunks) {
      // A delta must carry at least one character; an empty chunk adds nothing anyway.
      if (chunk.length === 0) continue;
      seq += 1;
      await messages.pushStreamDelta({ conversationId, messageId, seq, delta: chunk });
      text += chunk;
    }
  } catch (cause) {
    const errorMessage = (options.errorMessage?.(cause) ?? defaultErrorMessage).slice(0, 1000) || defaultErrorMessage;
    try {
      await messages.errorStream({ conversationId, messageId, errorMessage });
    } catch {
      // The server ends a stream left open once it has been idle too long, with the text it has.
    }
    throw new StreamAbortedError(messageId, text, { cause });
  }
  await messages.endStream({ conversationId, messageId, accumulatedText: text });
  return { messageId, text };
}
