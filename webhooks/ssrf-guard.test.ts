import { expect } from "chai";
import { isPrivateAddress, privateLiteralHost, webhookUrlProblem } from "./ssrf-guard.js";
import { WebhookClient } from "./delivery.js";

describe("webhook SSRF guard", () => {
  it("treats loopback, private, link-local, CGNAT, unique-local and IPv4-embedding IPv6 forms as private", () => {
    for (const address of ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "::", "fd00::1", "fe80::1",
      "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:a9fe:a9fe", "::7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::1"]) {
      expect(isPrivateAddress(address), address).to.equal(true);
    }
    for (const address of ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:5db8:d822"]) {
      expect(isPrivateAddress(address), address).to.equal(false);
    }
  });

  it("recognises private hosts written as IP addresses in URLs, which are never looked up", () => {
    expect(privateLiteralHost("https://127.0.0.1:8443/hook")).to.equal(true);
    expect(privateLiteralHost("https://[::ffff:127.0.0.1]/hook")).to.equal(true);
    expect(privateLiteralHost("https://[::1]:9/hook")).to.equal(true);
    expect(privateLiteralHost("https://169.254.169.254/latest/meta-data")).to.equal(true);
    expect(privateLiteralHost("https://2130706433/")).to.equal(true); // 127.0.0.1 as one number
    expect(privateLiteralHost("https://8.8.8.8/")).to.equal(false);
    expect(privateLiteralHost("https://example.com/")).to.equal(false);
  });

  it("refuses a private IP-address target before connecting", async () => {
    const client = new WebhookClient({ allowPrivateNetworks: false, timeoutMs: 1000 });
    try {
      for (const url of ["https://127.0.0.1:1/hook", "https://[::1]:1/hook", "https://10.0.0.1:1/hook"]) {
        expect(await client.post(url, "key", "{}"), url).to.deep.equal({ ok: false, reason: "EPRIVATE", blocked: true });
      }
    } finally {
      await client.close();
    }
  });

  it("accepts only absolute https URLs without credentials", () => {
    expect(webhookUrlProblem("https://example.com/hook")).to.equal(undefined);
    expect(webhookUrlProblem("http://example.com/hook")).to.match(/https/);
    expect(webhookUrlProblem("https://user:pass@example.com/")).to.match(/credentials/);
    expect(webhookUrlProblem("not a url")).to.match(/valid URL/);
  });
});
