import { expect } from "chai";
import { addressList, invalidAddressRule, isAddressRule, listContains, normalizeAddress, resolveClientAddress } from "./ip.js";

describe("IP address lists", () => {
  it("accepts IPv4 and IPv6 addresses and CIDR blocks, and nothing else", () => {
    for (const entry of ["203.0.113.7", "10.0.0.0/8", "0.0.0.0/0", "2001:db8::1", "2001:db8::/32", "::/0", "::ffff:192.0.2.1", "::ffff:10.0.0.0/104", " 198.51.100.1 "]) {
      expect(isAddressRule(entry), entry).to.equal(true);
    }
    for (const entry of ["", "localhost", "1.2.3", "1.2.3.4/33", "1.2.3.4/", "1.2.3.4/-1", "2001:db8::/129", "10.0.0.0/8/8", "1.2.3.04", "fe80::1%eth0", "::ffff:10.0.0.0/64", "1.2.3.4/a"]) {
      expect(isAddressRule(entry), entry).to.equal(false);
    }
    expect(invalidAddressRule(["10.0.0.1", "nope", "bad"])).to.equal("nope");
    expect(invalidAddressRule(["10.0.0.1"])).to.equal(undefined);
    expect(() => addressList(["10.0.0.1", "nope"])).to.throw(/nope/);
  });

  it("matches addresses and blocks of both families, treating IPv4-mapped IPv6 as IPv4", () => {
    const list = addressList(["203.0.113.7", "10.0.0.0/8", "2001:db8::/32", "::ffff:192.0.2.0/120"]);
    expect(listContains(list, "203.0.113.7")).to.equal(true);
    expect(listContains(list, "203.0.113.8")).to.equal(false);
    expect(listContains(list, "10.200.1.1")).to.equal(true);
    expect(listContains(list, "::ffff:10.200.1.1")).to.equal(true);
    expect(listContains(list, "::ffff:203.0.113.7")).to.equal(true);
    expect(listContains(list, "192.0.2.77")).to.equal(true);
    expect(listContains(list, "192.0.3.1")).to.equal(false);
    expect(listContains(list, "2001:db8:1::5")).to.equal(true);
    expect(listContains(list, "2001:db9::5")).to.equal(false);
    expect(listContains(list, "not an address")).to.equal(false);
    expect(listContains(list, "")).to.equal(false);
    expect(normalizeAddress("::FFFF:1.2.3.4")).to.equal("1.2.3.4");
    expect(normalizeAddress("::ffff:7f00:1")).to.equal("127.0.0.1");
    expect(listContains(addressList(["127.0.0.0/8"]), "::ffff:7f00:1")).to.equal(true);
  });

  describe("the client address behind proxies", () => {
    const trusted = addressList(["127.0.0.1", "10.0.0.0/8"]);

    it("is the TCP peer when no proxy is trusted or the peer is not one", () => {
      expect(resolveClientAddress("::ffff:127.0.0.1", "203.0.113.7", undefined)).to.equal("127.0.0.1");
      expect(resolveClientAddress("198.51.100.1", "203.0.113.7", trusted)).to.equal("198.51.100.1");
      expect(resolveClientAddress("127.0.0.1", undefined, trusted)).to.equal("127.0.0.1");
    });

    it("is the rightmost untrusted X-Forwarded-For hop behind trusted proxies", () => {
      expect(resolveClientAddress("127.0.0.1", "203.0.113.7", trusted)).to.equal("203.0.113.7");
      // The client wrote the left part itself: it cannot choose its address that way.
      expect(resolveClientAddress("127.0.0.1", "192.0.2.1, 203.0.113.7, 10.1.1.1", trusted)).to.equal("203.0.113.7");
      expect(resolveClientAddress("127.0.0.1", "2001:db8::5", trusted)).to.equal("2001:db8::5");
      expect(resolveClientAddress("127.0.0.1", " ::ffff:203.0.113.9 ", trusted)).to.equal("203.0.113.9");
      expect(resolveClientAddress("127.0.0.1", "10.2.2.2, 10.1.1.1", trusted)).to.equal("10.2.2.2");
      expect(resolveClientAddress("127.0.0.1", "garbage, 10.1.1.1", trusted)).to.equal("10.1.1.1");
      expect(resolveClientAddress("127.0.0.1", "garbage", trusted)).to.equal("127.0.0.1");
    });
  });
});
