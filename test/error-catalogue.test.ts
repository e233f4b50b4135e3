// The error catalogue against the upstream protocol's (nexus-proto v0.0.12, copied into
// test/fixtures/nexus-proto-v0.0.12.json) and against the table of docs/errors.md generated from it.
import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connectCodeName, withErrorTable } from "../scripts/error-table.js";
import { Errors } from "../shared/errors.js";

const facts = JSON.parse(readFileSync(join(import.meta.dirname, "fixtures", "nexus-proto-v0.0.12.json"), "utf8")) as {
  errorCodes: Record<string, number>;
  errorConnectCodes: Record<string, string>;
};
/** Upstream's catalogue: error name -> [errorCode, Connect code]. */
const upstream: Record<string, [number, string]> = Object.fromEntries(Object.entries(facts.errorCodes).map(([name, code]) => [name, [code, facts.errorConnectCodes[name]]]));
const upstreamNameOf = new Map(Object.entries(upstream).map(([name, [code]]) => [code, name]));
const entries = Object.values(Errors);

/** Where the spec fixes a Connect code (or we keep a better one), the upstream name travels with ours. */
const connectCodeDifferences: Record<string, Code> = {
  ALREADY_CONTACTS: Code.FailedPrecondition, // spec: SendFriendRequest to a contact
  NOT_BLOCKED: Code.NotFound, // spec: UnblockUser
  WEBHOOK_VERIFICATION_FAILED: Code.InvalidArgument, // spec: SetAgentConfig, bad webhook URL
  WEBHOOK_NOT_CONFIGURED: Code.InvalidArgument, // spec: SetAgentConfig, URL required for WEBHOOK
  VERIFY_CODE_SEND_FAILED: Code.Unavailable, // a delivery failure is worth retrying
};

describe("the error catalogue", () => {
  it("gives every condition its own code and its own name", () => {
    expect(new Set(entries.map((e) => e.errorCode)).size).to.equal(entries.length);
    expect(new Set(entries.map((e) => e.errorName)).size).to.equal(entries.length);
  });

  it("answers 7003 with FAILED_PRECONDITION for an agent that is not active, as the spec fixes", () => {
    expect(Errors.agentNotActive).to.include({ errorCode: 7003, code: Code.FailedPrecondition });
  });

  it("uses an upstream code only with the upstream name, and an upstream name only with the upstream code", () => {
    for (const e of entries) {
      const upstreamName = upstreamNameOf.get(e.errorCode);
      if (upstreamName !== undefined) expect(e.errorName, `code ${e.errorCode}`).to.equal(upstreamName);
      if (upstream[e.errorName] !== undefined) expect(e.errorCode, e.errorName).to.equal(upstream[e.errorName][0]);
    }
  });

  it("numbers Parley's own conditions from X901 in their block, clear of every upstream code", () => {
    for (const e of entries.filter((e) => !upstreamNameOf.has(e.errorCode))) {
      expect(e.errorCode, e.errorName).to.be.within(1000, 9999);
      expect(e.errorCode % 1000, e.errorName).to.be.at.least(901);
    }
  });

  it("carries upstream's Connect code for an upstream condition, except where the spec gives another", () => {
    for (const e of entries.filter((e) => upstream[e.errorName] !== undefined)) {
      const expected = connectCodeDifferences[e.errorName] ?? upstream[e.errorName][1].toUpperCase();
      expect(connectCodeName(e.code), e.errorName).to.equal(typeof expected === "number" ? connectCodeName(expected) : expected);
    }
  });

  it("is listed in full in docs/errors.md (regenerate with `npx tsx scripts/error-table.ts --write`)", () => {
    const readme = readFileSync(join(import.meta.dirname, "..", "docs", "errors.md"), "utf8");
    expect(withErrorTable(readme) === readme, "docs/errors.md's error table is out of date").to.equal(true);
    for (const e of entries) expect(readme).to.include(`| ${e.errorCode} | \`${e.errorName}\` | ${connectCodeName(e.code)} |`);
  });
});
