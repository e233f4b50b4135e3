// Reading the providers' credentials at start-up: a missing or malformed one stops the start with
// a message naming the setting, never a failure on the first message hours later.
import { createPrivateKey, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import type { CredentialSource } from "../../shared/config.js";

/** The credential's text and how to name it in a message ("APNS_KEY_FILE /etc/…" or "APNS_KEY"). */
export function readCredential(source: CredentialSource, variable: string): { text: string; origin: string } {
  if ("text" in source) return { text: source.text, origin: source.variable };
  const origin = `${variable}_FILE ${source.file}`;
  try {
    return { text: readFileSync(source.file, "utf8"), origin };
  } catch (err) {
    throw new Error(`${origin} cannot be read: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/** A PEM private key of the given type (and curve), or an error naming where it came from. */
export function privateKeyFrom(pem: string, origin: string, expected: { type: "ec" | "rsa"; curve?: string; what: string }): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (err) {
    throw new Error(`${origin} is not a PEM private key (${expected.what}): ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (key.asymmetricKeyType !== expected.type || (expected.curve && curve !== expected.curve)) {
    throw new Error(`${origin} must be ${expected.what}; it is a ${key.asymmetricKeyType}${curve ? ` ${curve}` : ""} key`);
  }
  return key;
}
