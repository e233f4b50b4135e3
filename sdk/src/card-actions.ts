// Card buttons. A user pressing a card's submit button reaches the agent that sent the card as a
// card action (nonSnUpdate.cardAction: the action id, the card's message, the submitted JSON and
// the button's verb). The user's client waits for the agent's AnswerCardAction (a toast or an
// alert) and the action expires after 5 minutes, so every action gets an answer here: the
// handler's, an empty one when the handler has nothing to say, and a failure notice when it
// throws or no handler takes the verb.
import type { Client } from "@connectrpc/connect";
import type { MessageService } from "../../shared/gen/api/v1/message_pb.js";
import type { CardActionPayload } from "../../shared/gen/shared/v1/updates_pb.js";

export interface CardActionReply {
  /** Shown to the user (at most 200 characters). */
  text?: string;
  /** An alert dialog instead of a toast. */
  showAlert?: boolean;
}

/**
 * Handles one card action. `data` is the submitted JSON parsed (undefined if it does not parse).
 * Answer with a reply, a string (a toast), or nothing (an empty answer).
 */
export type CardActionHandler = (action: CardActionPayload, data: unknown) => CardActionReply | string | void | Promise<CardActionReply | string | void>;

export interface CardActionsOptions {
  /** The answer when a handler throws or none takes the verb. */
  failureReply?: CardActionReply;
  /** A handler threw (the user got failureReply). */
  onError?: (err: unknown, action: CardActionPayload) => void;
}

function parsed(json: string): unknown {
  try {
    return JSON.parse(json) as unknown;
  } catch {
    return undefined;
  }
}

export class CardActions {
  private readonly byVerb = new Map<string, CardActionHandler>();
  private fallback: CardActionHandler | undefined;
  private readonly failureReply: CardActionReply;

  constructor(
    private readonly messages: Client<typeof MessageService>,
    private readonly options: CardActionsOptions = {},
  ) {
    this.failureReply = options.failureReply ?? { text: "Sorry, that did not work.", showAlert: false };
  }

  /** Handles the actions of buttons with this verb ("" for buttons without one). */
  on(verb: string, handler: CardActionHandler): this {
    this.byVerb.set(verb, handler);
    return this;
  }

  /** Handles actions whose verb no on() names. */
  otherwise(handler: CardActionHandler): this {
    this.fallback = handler;
    return this;
  }

  /** Runs the action's handler and answers the user with AnswerCardAction; answers what it sent. */
  async dispatch(action: CardActionPayload): Promise<CardActionReply> {
    const handler = this.byVerb.get(action.verb) ?? this.fallback;
    let reply: CardActionReply;
    if (!handler) {
      reply = this.failureReply;
    } else {
      try {
        const answer = await handler(action, parsed(action.actionData));
        reply = typeof answer === "string" ? { text: answer } : (answer ?? {});
      } catch (err) {
        this.options.onError?.(err, action);
        reply = this.failureReply;
      }
    }
    await this.messages.answerCardAction({
      conversationId: action.conversationId,
      messageId: action.messageId,
      actionId: action.actionId,
      text: reply.text,
      showAlert: reply.showAlert ?? false,
    });
    return reply;
  }
}
