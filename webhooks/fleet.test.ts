import { expect } from "chai";
import { queuedAgentOf, webhookQueuedRecord } from "./fleet.js";

describe("webhook fleet records", () => {
  const bytes = (text: string) => ({ value: new TextEncoder().encode(text) });

  it("reads back the agent a queued record names", () => {
    expect(queuedAgentOf(webhookQueuedRecord(10042))).to.equal(10042);
  });

  it("names no agent for a record that is not one (it still wakes the dispatcher)", () => {
    for (const text of ["", "not json", "null", "[]", '{"agentUserId":"10042"}', '{"agentUserId":-1}', '{"agentUserId":1.5}', '{"agentUserId":9007199254740993}']) {
      expect(queuedAgentOf(bytes(text)), text).to.equal(undefined);
    }
  });
});
