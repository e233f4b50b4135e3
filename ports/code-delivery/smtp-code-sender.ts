import nodemailer, { type Transporter } from "nodemailer";
import type { CodeSender, VerificationCode } from "./code-sender.js";

const subjects = { login: "Your Parley sign-in code", reset: "Your Parley password reset code" } as const;

/** Real email through any SMTP server; phone identities are out of its reach. */
export class SmtpCodeSender implements CodeSender {
  private readonly transport: Transporter;

  constructor(
    url: string,
    private readonly from: string,
  ) {
    this.transport = nodemailer.createTransport(url);
  }

  supports(identityType: VerificationCode["identityType"]): boolean {
    return identityType === "IDENTITY_TYPE_EMAIL";
  }

  async send(code: VerificationCode): Promise<void> {
    if (!this.supports(code.identityType)) throw new Error("SMTP delivery reaches email identities only");
    const action = code.purpose === "login" ? "sign in to Parley" : "reset your Parley password";
    await this.transport.sendMail({
      from: this.from,
      to: code.identityValue,
      subject: subjects[code.purpose],
      text: `Your code to ${action} is ${code.code}.\n\nIt expires in 5 minutes. If you did not ask for it, ignore this email.\n`,
    });
  }

  async close(): Promise<void> {
    this.transport.close();
  }
}
