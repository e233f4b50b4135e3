import type { CodeSender, VerificationCode } from "./code-sender.js";

/** Development driver: the code appears in the server log, so no mail or SMS setup is needed. */
export class ConsoleCodeSender implements CodeSender {
  constructor(private readonly log: { info(message: string): void }) {}

  supports(): boolean {
    return true;
  }

  async send(code: VerificationCode): Promise<void> {
    this.log.info(`verification code for ${code.identityType} ${code.identityValue} (${code.purpose}): ${code.code}`);
  }

  async close(): Promise<void> {}
}
