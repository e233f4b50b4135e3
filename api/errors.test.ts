import { expect } from "chai";
import moleculer from "moleculer";
import { Errors, ParleyError } from "../shared/errors.js";
import { errorPartsOf } from "./errors.js";

describe("API error mapping of what an engine call threw", () => {
  const logged: string[] = [];
  const log = (message: string) => void logged.push(message);
  beforeEach(() => (logged.length = 0));

  it("keeps a business error as it is", () => {
    expect(errorPartsOf(new ParleyError(Errors.groupNotFound), log).entry).to.equal(Errors.groupNotFound);
  });

  it("answers a retryable UNAVAILABLE, without logging a stack, when the engine cannot be reached or left before answering", () => {
    const unreachable = [
      new moleculer.Errors.ServiceNotAvailableError({ action: "conversation.sendMessage" }),
      new moleculer.Errors.RequestTimeoutError({ action: "conversation.sendMessage", nodeID: "engine-1" }),
      new moleculer.Errors.RequestRejectedError({ action: "conversation.sendMessage", nodeID: "engine-1" }),
    ];
    for (const err of unreachable) expect(errorPartsOf(err, log).entry).to.equal(Errors.unavailable);
    expect(errorPartsOf(unreachable[2], log).metadata).to.deep.equal({ reason: "ENGINE_NODE_LOST" });
    expect(logged).to.deep.equal([]);
  });

  it("answers INTERNAL for anything else, and logs it", () => {
    expect(errorPartsOf(new TypeError("boom"), log).entry).to.equal(Errors.internal);
    expect(logged).to.have.length(1);
  });
});
