import { expect } from "chai";
import { isGroupConversationId, privateConversationId, privateParticipants } from "./ids.js";

describe("conversation ids", () => {
  it("packs the larger user id in the high 32 bits, whatever the order", () => {
    expect(privateConversationId(10001, 10002)).to.equal((10002n << 32n) | 10001n);
    expect(privateConversationId(10002, 10001)).to.equal(privateConversationId(10001, 10002));
    expect(privateConversationId(2147483647, 2147483646)).to.equal((2147483647n << 32n) | 2147483646n);
  });

  it("unpacks the two users and refuses ids that are not PRIVATE", () => {
    expect(privateParticipants(privateConversationId(7, 300))).to.deep.equal([300, 7]);
    expect(privateParticipants(42n)).to.equal(undefined);
    expect(privateParticipants((5n << 32n) | 5n)).to.equal(undefined);
    expect(privateParticipants((5n << 32n) | 9n)).to.equal(undefined);
    expect(isGroupConversationId(42n)).to.equal(true);
    expect(isGroupConversationId(privateConversationId(1, 2))).to.equal(false);
  });
});
