// Rules on message bodies beyond the per-field bounds of the .proto: the type must name the
// content it carries, some types are the server's alone, cards must be JSON, and entities must
// lie inside the text they annotate.
import { create } from "@bufbuild/protobuf";
import {
  MessageBodySchema,
  MessageEntityType,
  MessageType,
  StreamPhase,
  type MessageBody,
  type MessageEntity,
  type StreamContent,
} from "../../shared/gen/shared/v1/message_pb.js";
import { Errors, ParleyError } from "../../shared/errors.js";

const contentOfType: Record<number, MessageBody["content"]["case"]> = {
  [MessageType.TEXT]: "text",
  [MessageType.IMAGE]: "image",
  [MessageType.AUDIO]: "audio",
  [MessageType.VIDEO]: "video",
  [MessageType.FILE]: "file",
  [MessageType.MARKDOWN]: "markdown",
  [MessageType.CARD]: "card",
  [MessageType.STREAM]: "stream",
  [MessageType.GROUP]: "group",
  [MessageType.RECALLED]: "recalled",
};

function invalid(message: string, metadata: Record<string, string> = {}): never {
  throw new ParleyError(Errors.invalidBody, metadata, message);
}

/** Length in characters (code points), the unit of the protocol's bounds and entity offsets. */
export function characterLength(text: string): number {
  let length = 0;
  for (const _ of text) length++;
  return length;
}

/** The detail each entity kind may carry; "none" for kinds that carry none. */
const detailOfEntityType: Record<number, MessageEntity["data"]["case"] | "none"> = {
  [MessageEntityType.MENTION]: "mention",
  [MessageEntityType.URL]: "url",
  [MessageEntityType.PHONE]: "phone",
  [MessageEntityType.HASHTAG]: "hashtag",
  [MessageEntityType.EMAIL]: "none",
  [MessageEntityType.BOLD]: "none",
  [MessageEntityType.ITALIC]: "none",
  [MessageEntityType.CODE]: "none",
};

/**
 * Entities must name their kind, carry only the detail of that kind (the detail may be left out:
 * the annotated text says it), and annotate characters of the text they belong to.
 */
export function checkEntities(text: string, entities: readonly MessageEntity[]): void {
  const length = characterLength(text);
  entities.forEach((entity, index) => {
    const expectedDetail = detailOfEntityType[entity.type];
    if (!expectedDetail) invalid(`entity ${index} has no type`, { entity: String(index) });
    if (entity.data.case !== undefined && entity.data.case !== expectedDetail) {
      invalid(`entity ${index} of type ${MessageEntityType[entity.type]} carries ${entity.data.case} details`, { entity: String(index) });
    }
    if (entity.offset < 0 || entity.length <= 0 || entity.offset + entity.length > length) {
      invalid(`entity ${index} lies outside the text (offset ${entity.offset}, length ${entity.length}, text length ${length})`, { entity: String(index) });
    }
  });
}

/**
 * Checks a body a client sends. Agents may start a stream; nobody sends GROUP or RECALLED bodies
 * (the server produces those). A custom payload travels with type UNSPECIFIED.
 */
/**
 * Whether a body starts a stream: STREAM content in phase START, or a bare body of type STREAM
 * (what the upstream Go SDK sends: the type alone, no content).
 */
export function startsStream(body: MessageBody): boolean {
  return body.content.case === "stream" || (body.content.case === undefined && body.type === MessageType.STREAM);
}

/**
 * The types a custom payload may carry: none (UNSPECIFIED), or any content type a client sends,
 * as upstream clients do (their schema refuses type 0); not the server's GROUP and RECALLED, nor
 * STREAM (a stream starts with stream content or none).
 */
const customPayloadTypes = new Set<number>([
  MessageType.UNSPECIFIED,
  MessageType.TEXT,
  MessageType.IMAGE,
  MessageType.AUDIO,
  MessageType.VIDEO,
  MessageType.FILE,
  MessageType.MARKDOWN,
  MessageType.CARD,
]);

export function checkOutgoingBody(body: MessageBody, senderIsAgent: boolean): void {
  const content = body.content;
  if (content.case === undefined && body.type === MessageType.STREAM) {
    if (!senderIsAgent) invalid("only agents stream messages");
    return;
  }
  if (content.case === "customPayload") {
    if (!customPayloadTypes.has(body.type)) invalid(`a custom payload does not go with type ${MessageType[body.type] ?? body.type}`);
    return;
  }
  if (content.case === undefined) invalid("the body has no content");
  if (contentOfType[body.type] !== content.case) invalid(`type ${MessageType[body.type] ?? body.type} does not match the ${content.case} content`);
  switch (content.case) {
    case "group":
    case "recalled":
      invalid(`${content.case} bodies are produced by the server only`);
      break;
    case "text":
      checkEntities(content.value.text, content.value.entities);
      break;
    case "markdown":
      checkEntities(content.value.rawMarkdown, content.value.entities);
      break;
    case "card":
      try {
        JSON.parse(content.value.cardJson);
      } catch (err) {
        invalid(`cardJson is not valid JSON: ${err instanceof Error ? err.message : String(err)}`, { field: "card_json" });
      }
      break;
    case "stream":
      if (!senderIsAgent) invalid("only agents stream messages");
      if (content.value.phase !== StreamPhase.START && content.value.phase !== StreamPhase.UNSPECIFIED) {
        invalid("a stream starts with phase START; continue it with PushStreamDelta, EndStream or ErrorStream");
      }
      break;
  }
}

/** The users a GROUP body's event names (members, inviter, operator): their UserInfo goes with it. */
export function groupEventUserIds(body: MessageBody): number[] {
  if (body.content.case !== "group") return [];
  const { event } = body.content.value;
  const named = (() => {
    switch (event.case) {
      case "memberJoined":
        return [...event.value.members, event.value.inviter];
      case "memberLeft":
        return [event.value.member];
      case "memberRemoved":
        return [event.value.member, event.value.operator];
      case "groupInfoChanged":
        return [event.value.operator];
      default:
        return [];
    }
  })();
  return [...new Set(named.flatMap((member) => (member ? [member.userId] : [])))];
}

/** The stream content of a body whose stream is still open (START or DELTA), or undefined. */
export function openStreamOf(body: MessageBody): StreamContent | undefined {
  if (body.content.case !== "stream") return undefined;
  const { phase } = body.content.value;
  return phase === StreamPhase.END || phase === StreamPhase.ERROR ? undefined : body.content.value;
}

/** The stored body of a finished stream: END with its text and entities, or ERROR with the text so far. */
export function finishedStreamBody(contentType: string, text: string, outcome: { entities: MessageEntity[] } | { error: string }): MessageBody {
  return create(MessageBodySchema, {
    type: MessageType.STREAM,
    content: {
      case: "stream",
      value:
        "error" in outcome
          ? { phase: StreamPhase.ERROR, contentType, accumulatedText: text, errorMessage: outcome.error }
          : { phase: StreamPhase.END, contentType, accumulatedText: text, entities: outcome.entities },
    },
  });
}

/** The stored START body of a new stream: no text yet, only the content type. */
export function streamStartBody(requested: MessageBody): MessageBody {
  const contentType = requested.content.case === "stream" ? requested.content.value.contentType : "";
  return create(MessageBodySchema, {
    type: MessageType.STREAM,
    content: { case: "stream", value: { phase: StreamPhase.START, contentType: contentType || "text/plain" } },
  });
}

export function recalledBody(): MessageBody {
  return create(MessageBodySchema, { type: MessageType.RECALLED, content: { case: "recalled", value: {} } });
}

/** The first 100 characters of what a message says, for reply previews. */
export function contentPreview(body: MessageBody): string {
  const content = body.content;
  const text =
    content.case === "text"
      ? content.value.text
      : content.case === "markdown"
        ? content.value.rawMarkdown
        : content.case === "card"
          ? content.value.fallbackText
          : content.case === "stream"
            ? content.value.accumulatedText
            : content.case === "file"
              ? content.value.filename
              : content.case
                ? `[${content.case}]`
                : "";
  return [...text].slice(0, 100).join("");
}

/** How much of a message a lock screen shows, in characters. */
const notificationPreviewLength = 100;
/** The UTF-16 units a preview is made from: room for 100 characters after whitespace is folded and marks dropped. */
const previewWindow = 8 * notificationPreviewLength;

/**
 * What an offline notification says of a message: its words where it has some (Markdown without
 * its marks, a card's fallback text, a stream's final text), a label where it has none, cut at
 * notificationPreviewLength characters with an ellipsis (docs/behaviour.md, offline push).
 */
export function notificationPreview(body: MessageBody): string {
  const content = body.content;
  // Runs for every message sent: only the start of a long text (up to 10,000 characters, a stream's
  // final text unbounded) is worked on, never all of it.
  let cut = false;
  const head = (text: string) => {
    if (text.length <= previewWindow) return text;
    cut = true;
    // Never half a character: a window ending inside a surrogate pair ends before it.
    const lastUnit = text.charCodeAt(previewWindow - 1);
    return text.slice(0, lastUnit >= 0xd800 && lastUnit <= 0xdbff ? previewWindow - 1 : previewWindow);
  };
  const words = (() => {
    switch (content.case) {
      case "text":
        return head(content.value.text);
      case "markdown":
        return withoutMarkdownMarks(head(content.value.rawMarkdown));
      case "card":
        return content.value.fallbackText || "[Card]";
      case "stream":
        return head(content.value.accumulatedText) || "[Message]";
      case "image":
        return "[Photo]";
      case "audio":
        return "[Voice message]";
      case "video":
        return "[Video]";
      case "file":
        return `[File] ${content.value.filename}`;
      default:
        return "[Message]";
    }
  })();
  const characters = [...words.replace(/\s+/g, " ").trim()];
  const longer = characters.length > notificationPreviewLength || cut;
  return longer ? `${characters.slice(0, notificationPreviewLength - 1).join("")}…` : characters.join("");
}

/** Markdown as a reader sees it: links as their text, no emphasis, heading or quote marks, no code fences. */
function withoutMarkdownMarks(markdown: string): string {
  return markdown
    .replace(/```[^\n]*\n?/g, "")
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/^\s{0,3}(#{1,6}|>+|[-*+]|\d+\.)\s+/gm, "")
    .replace(/(\*\*|__|\*|_|~~|`)(?=\S)([^]*?\S)\1/g, "$2");
}
