// Picks the code-delivery driver CODE_DELIVERY names (the port is code-sender.ts).
import type { CodeDelivery } from "../../shared/config.js";
import type { CodeSender } from "./code-sender.js";
import { ConsoleCodeSender } from "./console-code-sender.js";
import { FileCodeSender } from "./file-code-sender.js";
import { SmtpCodeSender } from "./smtp-code-sender.js";

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
