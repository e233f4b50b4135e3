// The code-delivery port: how verification codes leave the server (CODE_DELIVERY).
// Drivers: console (development), file:<path> (tests and local tools), smtp:// (real email).
// open-code-sender.ts picks the driver.

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
