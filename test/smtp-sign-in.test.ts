import type { AddressInfo } from "node:net";
import { expect } from "chai";
import { SMTPServer } from "smtp-server";
import { AuthService } from "../shared/gen/api/v1/auth_pb.js";
import { IdentityType } from "../shared/gen/api/v1/common_pb.js";
import { Errors } from "../shared/errors.js";
import { device } from "./support/accounts.js";
import { expectError } from "./support/expect-error.js";
import { client, freshEmail, startTestServer, type TestServer } from "./support/harness.js";

describe("sign-in with CODE_DELIVERY=smtp://", () => {
  let smtp: SMTPServer;
  let server: TestServer;
  const mails: { to: string; raw: string }[] = [];
  let accepting = true;

  before(async () => {
    smtp = new SMTPServer({
      authOptional: true,
      disabledCommands: ["STARTTLS", "AUTH"],
      logger: false,
      onRcptTo(address, _session, callback) {
        callback(accepting ? undefined : new Error("mailbox unavailable"));
      },
      onData(stream, session, callback) {
        const chunks: Buffer[] = [];
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () => {
          mails.push({ to: session.envelope.rcptTo[0].address, raw: Buffer.concat(chunks).toString("utf8") });
          callback();
        });
      },
    });
    await new Promise<void>((resolve) => smtp.listen(0, "127.0.0.1", resolve));
    const port = (smtp.server.address() as AddressInfo).port;
    server = await startTestServer({ env: { CODE_DELIVERY: `smtp://127.0.0.1:${port}` } });
  });
  after(async () => {
    await server.dispose();
    await new Promise<void>((resolve) => smtp.close(() => resolve()));
  });

  it("emails the code, which signs the user in", async () => {
    const auth = client(server, AuthService, "json");
    const email = freshEmail("smtp");
    const { verifyToken } = await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
    const mail = mails.find((m) => m.to === email);
    const code = /is (\d{6})\./.exec(mail?.raw ?? "")?.[1];
    expect(code, "a six-digit code in the email").to.be.a("string");
    const signed = await auth.verifyCode({ verifyToken, code: code!, deviceInfo: device() });
    expect(signed.isNewUser).to.equal(true);
  });

  it("disables phone sign-in, which SMTP cannot reach", async () => {
    const auth = client(server, AuthService, "json");
    expect((await auth.getClientConfig({})).login).to.deep.include({ emailEnabled: true, phoneEnabled: false });
    await expectError(auth.requestVerifyCode({ identityType: IdentityType.PHONE, identityValue: "+15551234567" }), Errors.identityDisabled);
  });

  it("answers UNAVAILABLE when the mail server refuses, without spending the identity's rate limit", async () => {
    const auth = client(server, AuthService, "json");
    const email = freshEmail("smtp");
    accepting = false;
    try {
      await expectError(auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email }), Errors.codeDeliveryFailed);
    } finally {
      accepting = true;
    }
    await auth.requestVerifyCode({ identityType: IdentityType.EMAIL, identityValue: email });
  });
});
