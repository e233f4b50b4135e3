import { appendFile, mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import type { CodeSender, VerificationCode } from "./code-sender.js";

/** Appends one JSON line per code (the operator contract's format), in send order. */
export class FileCodeSender implements CodeSender {
  // Appends are chained so concurrent sends never interleave partial lines.
  private tail: Promise<void>;

  constructor(private readonly path: string) {
    this.tail = mkdir(dirname(path), { recursive: true }).then(() => undefined);
  }

  supports(): boolean {
    return true;
  }

  send(code: VerificationCode): Promise<void> {
    const line =
      JSON.stringify({ identityType: code.identityType, identityValue: code.identityValue, code: code.code, purpose: code.purpose, at: code.at }) + "\n";
    const written = this.tail.then(() => appendFile(this.path, line, "utf8"));
    this.tail = written.catch(() => undefined);
    return written;
  }

  async close(): Promise<void> {
    await this.tail;
  }
}
