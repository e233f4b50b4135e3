import { expect } from "chai";
import { PresenceTracker } from "./presence.js";

describe("PresenceTracker", () => {
  it("counts a user online while any node reports a connection for them", () => {
    const tracker = new PresenceTracker();
    tracker.apply({ nodeId: "gw-1", counts: [{ userId: 7, connections: 2 }], full: false });
    tracker.apply({ nodeId: "gw-2", counts: [{ userId: 7, connections: 1 }], full: false });
    tracker.apply({ nodeId: "gw-1", counts: [{ userId: 7, connections: 0 }], full: false });
    expect(tracker.isOnline(7)).to.equal(true);
    tracker.apply({ nodeId: "gw-2", counts: [{ userId: 7, connections: 0 }], full: false });
    expect(tracker.isOnline(7)).to.equal(false);
  });

  it("forgets every user of a node that left, and only of that node", () => {
    const tracker = new PresenceTracker();
    tracker.apply({ nodeId: "gw-1", counts: [{ userId: 1, connections: 1 }, { userId: 2, connections: 1 }], full: false });
    tracker.apply({ nodeId: "gw-2", counts: [{ userId: 2, connections: 1 }, { userId: 3, connections: 1 }], full: false });
    tracker.dropNode("gw-1");
    expect([1, 2, 3].map((id) => tracker.isOnline(id))).to.deep.equal([false, true, true]);
    // A node that comes back reports afresh.
    tracker.apply({ nodeId: "gw-1", counts: [{ userId: 1, connections: 1 }], full: true });
    expect(tracker.isOnline(1)).to.equal(true);
  });

  it("takes a full report as the node's whole picture: users it leaves out go offline there", () => {
    const tracker = new PresenceTracker();
    tracker.apply({ nodeId: "gw-1", counts: [{ userId: 1, connections: 1 }, { userId: 2, connections: 3 }], full: false });
    tracker.apply({ nodeId: "gw-1", counts: [{ userId: 2, connections: 1 }], full: true });
    expect([1, 2].map((id) => tracker.isOnline(id))).to.deep.equal([false, true]);
    tracker.apply({ nodeId: "gw-1", counts: [], full: true });
    expect(tracker.isOnline(2)).to.equal(false);
  });
});
