// Asserts that a call fails with a given Connect code and catalogue entry.
import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { ErrorDetailSchema, type ErrorDetail } from "../../shared/gen/shared/v1/error_pb.js";
import type { CatalogueEntry } from "../../shared/errors.js";

export async function expectError(call: Promise<unknown>, expected: Code | CatalogueEntry): Promise<ErrorDetail> {
  let caught: unknown;
  try {
    await call;
  } catch (err) {
    caught = err;
  }
  expect(caught, "the call should have failed").to.be.instanceOf(ConnectError);
  const error = caught as ConnectError;
  const code = typeof expected === "number" ? expected : expected.code;
  expect(Code[error.code], `Connect code (message: ${error.rawMessage})`).to.equal(Code[code]);
  const details = error.findDetails(ErrorDetailSchema);
  expect(details, "exactly one ErrorDetail").to.have.length(1);
  if (typeof expected !== "number") {
    expect(details[0].errorName).to.equal(expected.errorName);
    expect(details[0].errorCode).to.equal(expected.errorCode);
  }
  return details[0];
}
