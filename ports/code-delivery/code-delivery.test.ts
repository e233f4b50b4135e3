import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { SMTPServer } from "smtp-server";
import type { VerificationCode } from "./code-sender.js";
import { describeCodeDeliveryConformance } from "./code-delivery-conformance.js";
import { createCodeSender } from "./open-code-sender.js";

const sample = (code: string, identityValue = "ada@example.com"): VerificationCode => ({
  identityType: "IDENTITY_TYPE_EMAIL",
  identityValue,
  code,
  purpose: "login",
  at: 1763800000000,
});

/** A real SMTP server on an ephemeral port, keeping each message's recipients and raw text. */
async function startSmtp(): Promise<{ port: number; received: { to: string[]; raw: string }[]; close(): Promise<void> }> {
  const received: { to: string[]; raw: string }[] = [];
  const smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        received.push({ to: session.envelope.rcptTo.map((r) => r.address), raw: Buffer.concat(chunks).toString("utf8") });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, "127.0.0.1", resolve));
  return { port: (smtp.server.address() as AddressInfo).port, received, close: () => new Promise<void>((resolve) => smtp.close(() => resolve())) };
}

describe("verification code delivery", () => {
  it("console: logs one line carrying the code", async () => {
    const lines: string[] = [];
    const sender = createCodeSender({ kind: "console" }, { info: (line) => lines.push(line) });
    await sender.send(sample("482913"));
    expect(lines).to.have.length(1);
    expect(lines[0]).to.include("482913").and.include("ada@example.com");
    expect(sender.supports("IDENTITY_TYPE_PHONE")).to.equal(true);
  });

  it("file: appends one JSON line per code with the contract's keys, intact under concurrency", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-codes-"));
    try {
      const path = join(dir, "nested", "codes.jsonl");
      const sender = createCodeSender({ kind: "file", path }, { info: () => {} });
      await Promise.all(Array.from({ length: 20 }, (_, i) => sender.send(sample(String(100000 + i), `u${i}@example.com`))));
      await sender.close();
      const lines = readFileSync(path, "utf8").trimEnd().split("\n");
      expect(lines).to.have.length(20);
      for (const line of lines) {
        const parsed = JSON.parse(line) as Record<string, unknown>;
        expect(Object.keys(parsed)).to.deep.equal(["identityType", "identityValue", "code", "purpose", "at"]);
      }
      expect(lines.map((l) => (JSON.parse(l) as { code: string }).code).sort()).to.deep.equal(Array.from({ length: 20 }, (_, i) => String(100000 + i)));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe("smtp", () => {
    let smtp: Awaited<ReturnType<typeof startSmtp>>;
    let port: number;
    let received: { to: string[]; raw: string }[];
    before(async () => {
      smtp = await startSmtp();
      ({ port, received } = smtp);
    });
    after(() => smtp.close());

    it("sends a real email to the identity with the code", async () => {
      const sender = createCodeSender({ kind: "smtp", url: `smtp://127.0.0.1:${port}`, from: "Parley <codes@parley.test>" }, { info: () => {} });
      await sender.send({ ...sample("739204", "grace@example.com"), purpose: "reset" });
      await sender.close();
      expect(received).to.have.length(1);
      expect(received[0].to).to.deep.equal(["grace@example.com"]);
      expect(received[0].raw).to.include("739204").and.include("reset");
      expect(received[0].raw).to.match(/^From: Parley <codes@parley\.test>/m);
    });

    it("reaches email only, and rejects when the server cannot be reached", async () => {
      const sender = createCodeSender({ kind: "smtp", url: "smtp://127.0.0.1:1", from: "x@parley.test" }, { info: () => {} });
      expect(sender.supports("IDENTITY_TYPE_PHONE")).to.equal(false);
      expect(sender.supports("IDENTITY_TYPE_EMAIL")).to.equal(true);
      let failed = false;
      await sender.send(sample("111111")).catch(() => (failed = true));
      expect(failed).to.equal(true);
      await sender.close();
    });
  });
});

describeCodeDeliveryConformance("console", async () => {
  const lines: string[] = [];
  return { sender: createCodeSender({ kind: "console" }, { info: (line) => lines.push(line) }), received: async () => [...lines], cleanup: async () => {} };
});

describeCodeDeliveryConformance("file", async () => {
  const dir = mkdtempSync(join(tmpdir(), "parley-codes-"));
  const path = join(dir, "codes.jsonl");
  const sender = createCodeSender({ kind: "file", path }, { info: () => {} });
  return {
    sender,
    received: async () => {
      try {
        return readFileSync(path, "utf8").split("\n").filter(Boolean);
      } catch {
        return [];
      }
    },
    cleanup: async () => {
      await sender.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

describeCodeDeliveryConformance("smtp", async () => {
  const smtp = await startSmtp();
  const sender = createCodeSender({ kind: "smtp", url: `smtp://127.0.0.1:${smtp.port}`, from: "Parley <codes@parley.test>" }, { info: () => {} });
  return {
    sender,
    received: async () => smtp.received.map(({ raw }) => raw),
    cleanup: async () => {
      await sender.close();
      await smtp.close();
    },
  };
});
