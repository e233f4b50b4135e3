// The code-delivery port: how verification codes leave the server (CODE_DELIVERY).
// Drivers: console (development), file:<path> (tests and local tools), smtp:// (real email).
import type { CodeDelivery } from "../../shared/config.js";
import { ConsoleCodeSender } from "./console-code-sender.js";
import { FileCodeSender } from "./file-code-sender.js";
import { SmtpCodeSender } from "./smtp-code-sender.js";

export interface VerificationCode {
  identityType: "IDENTITY_TYPE_EMAIL" | "IDENTITY_TYPE_PHONE";
  identityValue: string;
  code: string;
  purpose: "login" | "reset";
  /** Unix ms. */
  at: number;
}

export interface CodeSender {
  /** Whether this driver can reach identities of this type (SMTP reaches only email). */
  supports(identityType: VerificationCode["identityType"]): boolean;
  /** Delivers the code; rejects when the driver could not hand it over. */
  send(code: VerificationCode): Promise<void>;
  /** Releases connections or file handles. */
  close(): Promise<void>;
}

export function createCodeSender(delivery: CodeDelivery, log: { info(message: string): void }): CodeSender {
  switch (delivery.kind) {
    case "console":
      return new ConsoleCodeSender(log);
    case "file":
      return new FileCodeSender(delivery.path);
    case "smtp":
      return new SmtpCodeSender(delivery.url, delivery.from);
  }
}
