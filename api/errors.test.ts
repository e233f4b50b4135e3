import { expect } from "chai";
import moleculer from "moleculer";
import { Errors, ParleyError } from "../shared/errors.js";
import type { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../shared/gen/shared/v1/error_pb.js";
import { connectErrorOf, errorDetailsJson, errorPartsOf } from "./errors.js";

describe("API error mapping of what an engine call threw", () => {
  const logged: string[] = [];
  const log = (message: string) => void logged.push(message);
  beforeEach(() => (logged.length = 0));

  it("keeps a business error as it is", () => {
    expect(errorPartsOf(new ParleyError(Errors.groupNotFound), log).entry).to.equal(Errors.groupNotFound);
  });

  it("answers a retryable UNAVAILABLE, without logging a stack, when the engine cannot be reached or left before answering", () => {
    const unreachable = [
      new moleculer.Errors.ServiceNotAvailableError({ action: "messages.sendMessage" }),
      new moleculer.Errors.RequestTimeoutError({ action: "messages.sendMessage", nodeID: "engine-1" }),
      new moleculer.Errors.RequestRejectedError({ action: "messages.sendMessage", nodeID: "engine-1" }),
    ];
    for (const err of unreachable) expect(errorPartsOf(err, log).entry).to.equal(Errors.unavailable);
    // Whether the call may have been applied rides in the reason: never, maybe, maybe.
    expect(unreachable.map((err) => errorPartsOf(err, log).metadata.reason)).to.deep.equal(["NO_ENGINE", "ENGINE_TIMEOUT", "ENGINE_NODE_LOST"]);
    expect(logged).to.deep.equal([]);
  });

  it("gives every UNAVAILABLE answer the retry delay of its reason, and other answers none", () => {
    const detailOf = (err: ConnectError) => err.findDetails(ErrorDetailSchema)[0];
    expect(detailOf(connectErrorOf(Errors.unavailable, { reason: "OWNERSHIP_LOST", shard: "7" })).metadata).to.deep.equal({ reason: "OWNERSHIP_LOST", shard: "7", retryAfterMs: "250" });
    expect(detailOf(connectErrorOf(Errors.unavailable, { reason: "ENGINE_TIMEOUT" })).metadata.retryAfterMs).to.equal("1000");
    expect(detailOf(connectErrorOf(Errors.unavailable)).metadata.retryAfterMs).to.equal("1000");
    // A delay the thrower chose is kept.
    expect(detailOf(connectErrorOf(Errors.unavailable, { reason: "NO_ENGINE", retryAfterMs: "5" })).metadata.retryAfterMs).to.equal("5");
    expect(detailOf(connectErrorOf(Errors.groupNotFound, { reason: "x" })).metadata).to.deep.equal({ reason: "x" });
    const [json] = errorDetailsJson(Errors.unavailable, { reason: "UPSTREAM_FAILED" }) as { debug: { metadata: Record<string, string> } }[];
    expect(json.debug.metadata).to.deep.equal({ reason: "UPSTREAM_FAILED", retryAfterMs: "500" });
  });

  it("answers INTERNAL for anything else, and logs it", () => {
    expect(errorPartsOf(new TypeError("boom"), log).entry).to.equal(Errors.internal);
    expect(logged).to.have.length(1);
  });
});
