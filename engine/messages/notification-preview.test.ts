// What an offline notification says of each kind of message (docs/behaviour.md, "Offline push").
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { expect } from "chai";
import { MessageBodySchema } from "../../shared/gen/shared/v1/message_pb.js";
import { notificationPreview } from "./message-body.js";

const body = (content: MessageInitShape<typeof MessageBodySchema>["content"]) => create(MessageBodySchema, { content });

describe("notificationPreview", () => {
  it("keeps short text as written, folding whitespace runs", () => {
    expect(notificationPreview(body({ case: "text", value: { text: "  see you\n\n at  nine " } }))).to.equal("see you at nine");
  });

  it("cuts long text at 100 characters, counting characters rather than UTF-16 units, with an ellipsis", () => {
    const preview = notificationPreview(body({ case: "text", value: { text: "😀".repeat(150) } }));
    expect([...preview]).to.have.length(100);
    expect(preview).to.equal(`${"😀".repeat(99)}…`);
  });

  it("reads only the start of a very long text, and still says it was cut", () => {
    const preview = notificationPreview(body({ case: "text", value: { text: `${"a ".repeat(30)}${"b".repeat(9_000)}` } }));
    expect(preview).to.equal(`${"a ".repeat(30)}${"b".repeat(39)}…`);
    // Whitespace folded down to fewer than 100 characters inside the window: still marked as cut.
    expect(notificationPreview(body({ case: "text", value: { text: `x${" ".repeat(900)}y` } }))).to.equal("x…");
    // A window ending inside a surrogate pair leaves the whole character out, not half of it.
    expect(notificationPreview(body({ case: "text", value: { text: `ab${" ".repeat(797)}😀 and more` } }))).to.equal("ab…");
  });

  it("shows Markdown without its marks, a card's fallback text, a stream's final text, and labels for the rest", () => {
    expect(notificationPreview(body({ case: "markdown", value: { rawMarkdown: "# Plan\n**Bold** and [the link](http://x) `code`" } }))).to.equal("Plan Bold and the link code");
    expect(notificationPreview(body({ case: "card", value: { cardJson: "{}", fallbackText: "Pick a time" } }))).to.equal("Pick a time");
    expect(notificationPreview(body({ case: "card", value: { cardJson: "{}", fallbackText: "" } }))).to.equal("[Card]");
    expect(notificationPreview(body({ case: "stream", value: { accumulatedText: "the answer" } }))).to.equal("the answer");
    expect(notificationPreview(body({ case: "image", value: { fileId: "f" } }))).to.equal("[Photo]");
    expect(notificationPreview(body({ case: "audio", value: { fileId: "f" } }))).to.equal("[Voice message]");
    expect(notificationPreview(body({ case: "video", value: { fileId: "f" } }))).to.equal("[Video]");
    expect(notificationPreview(body({ case: "file", value: { fileId: "f", filename: "plan.pdf" } }))).to.equal("[File] plan.pdf");
  });
});
