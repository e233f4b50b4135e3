import { expect } from "chai";
import { OwnershipPolicy } from "./ownership.js";
import { keysByOwner, ownerOf } from "./shard-owners.js";

describe("Shard placement (rendezvous hashing)", () => {
  const shards = Array.from({ length: OwnershipPolicy.shards }, (_, shard) => shard);
  const placementOver = (nodes: string[]) => shards.map((shard) => ownerOf(shard, nodes));

  it("answers the same owner whatever the order the nodes are listed in, and none without nodes", () => {
    expect(placementOver(["engine-1", "engine-2", "engine-3"])).to.deep.equal(placementOver(["engine-3", "engine-1", "engine-2"]));
    expect(ownerOf(5, [])).to.equal(undefined);
  });

  it("spreads shards evenly and moves only the joining node's share when a node joins", () => {
    const three = placementOver(["engine-1", "engine-2", "engine-3"]);
    for (const node of ["engine-1", "engine-2", "engine-3"]) {
      const share = three.filter((owner) => owner === node).length / shards.length;
      expect(share).to.be.within(0.25, 0.42);
    }
    const four = placementOver(["engine-1", "engine-2", "engine-3", "engine-4"]);
    const moved = shards.filter((shard) => three[shard] !== four[shard]);
    // Every moved shard went to the new node; none moved between the old ones.
    expect(moved.every((shard) => four[shard] === "engine-4")).to.equal(true);
    expect(moved.length / shards.length).to.be.within(0.18, 0.32);
  });

  it("a node leaving hands only its own shards over", () => {
    const before = placementOver(["a", "b", "c"]);
    const after = placementOver(["a", "c"]);
    for (const shard of shards) if (before[shard] !== "b") expect(after[shard]).to.equal(before[shard]);
  });

  it("groups keys by their owners", () => {
    const groups = keysByOwner([1, 2, 3, 4, 5, 6], (userId) => `u:${userId}`, ["a", "b"]);
    expect([...groups.values()].flat().sort()).to.deep.equal([1, 2, 3, 4, 5, 6]);
    expect([...groups.keys()].every((node) => node === "a" || node === "b")).to.equal(true);
    expect([...keysByOwner([1], (userId) => `u:${userId}`, []).keys()]).to.deep.equal([undefined]);
  });
});
