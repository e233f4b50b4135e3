// The promises of the code-delivery port (code-sender.ts), as one mocha suite every driver must
// pass: each is read back through its own medium (the log, the file, a real SMTP server).
import { expect } from "chai";
import type { CodeSender, VerificationCode } from "./code-sender.js";

export interface CodeDeliveryUnderTest {
  sender: CodeSender;
  /** What the medium holds so far, one text per delivered code, in the order they arrived. */
  received(): Promise<string[]>;
  cleanup(): Promise<void>;
}

const code = (value: string, identityValue: string, purpose: VerificationCode["purpose"] = "login"): VerificationCode => ({
  identityType: "IDENTITY_TYPE_EMAIL",
  identityValue,
  code: value,
  purpose,
  at: 1763800000000,
});

export function describeCodeDeliveryConformance(name: string, open: () => Promise<CodeDeliveryUnderTest>): void {
  describe(`code delivery conformance: ${name}`, () => {
    let subject: CodeDeliveryUnderTest;
    beforeEach(async () => {
      subject = await open();
    });
    afterEach(async () => subject.cleanup());

    it("reaches email identities", () => {
      expect(subject.sender.supports("IDENTITY_TYPE_EMAIL")).to.equal(true);
    });

    it("delivers a code so that its medium carries the code, the identity and the purpose", async () => {
      await subject.sender.send(code("530117", "lin@example.com", "reset"));
      const [delivered, ...more] = await subject.received();
      expect(more).to.deep.equal([]);
      expect(delivered).to.include("530117").and.include("lin@example.com").and.include("reset");
    });

    it("delivers each of many codes sent at once exactly once, each with its own identity", async () => {
      const codes = Array.from({ length: 8 }, (_, i) => code(String(200000 + i), `u${i}@example.com`));
      await Promise.all(codes.map((c) => subject.sender.send(c)));
      const delivered = await subject.received();
      expect(delivered).to.have.length(codes.length);
      for (const c of codes) {
        const carrying = delivered.filter((text) => text.includes(c.code));
        expect(carrying, c.code).to.have.length(1);
        expect(carrying[0]).to.include(c.identityValue);
      }
    });
  });
}
